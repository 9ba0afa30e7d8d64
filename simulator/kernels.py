"""Hot-path kernels behind one seam: numba versions and pure-Python references of the same signature.

- ``chain_hashes(tokens, block_size, parent)``: one 64-bit hash per *full* block, each chained from the
  previous block's hash (FNV-1a over the token ids, finished with splitmix64). The same bytes in any
  process (no Python ``hash()``, no PYTHONHASHSEED).
- ``common_prefix_len(a, b)``: length of the longest common prefix of two token arrays.

``tests/test_kernels.py`` checks with hypothesis that each numba kernel agrees with its reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MASK = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
ROOT_HASH = 0x9E3779B97F4A7C15


def _splitmix_py(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def chain_hashes_py(tokens: np.ndarray, block_size: int, parent: int) -> np.ndarray:
    """Reference: hashes of the full blocks of ``tokens`` chained from ``parent``."""
    n = len(tokens) // block_size
    out = np.empty(n, dtype=np.uint64)
    h = parent & MASK
    for b in range(n):
        x = (FNV_OFFSET ^ h) & MASK
        for t in tokens[b * block_size:(b + 1) * block_size]:
            x = ((x ^ (int(t) & MASK)) * FNV_PRIME) & MASK
        h = _splitmix_py(x)
        out[b] = h
    return out


def common_prefix_len_py(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@njit(cache=True)
def _splitmix_nb(x):  # type: ignore[no-untyped-def]
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def _chain_hashes_nb(tokens, block_size, parent):  # type: ignore[no-untyped-def]
    n = len(tokens) // block_size
    out = np.empty(n, dtype=np.uint64)
    h = parent
    for b in range(n):
        x = np.uint64(FNV_OFFSET) ^ h
        for i in range(b * block_size, (b + 1) * block_size):
            x = (x ^ np.uint64(np.int64(tokens[i]))) * np.uint64(FNV_PRIME)
        h = _splitmix_nb(x)
        out[b] = h
    return out


@njit(cache=True)
def _common_prefix_len_nb(a, b):  # type: ignore[no-untyped-def]
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def chain_hashes(tokens: np.ndarray, block_size: int, parent: int = ROOT_HASH) -> np.ndarray:
    return _chain_hashes_nb(np.asarray(tokens, dtype=np.int64), block_size, np.uint64(parent & MASK))


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    return int(_common_prefix_len_nb(a, b))
