"""Token ids for hash-id blocks: one deterministic block per id (rule G1 of ``trace-formats.md``).

An id's tokens are a counter-based hash of (seed, id, position) folded into [vocab_low, vocab_high), so the same id
always gives the same tokens and a partial block is the prefix of its id's block. Blocks that follow the same
block (or that open a prompt) start with distinct tokens while the vocabulary allows, so two prompts share
exactly the tokens of their equal leading ids and not one token more.
"""

from __future__ import annotations

import numpy as np

_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
CHUNK = 1 << 22


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def block_tokens(seed: int, ids: np.ndarray, lengths: np.ndarray, vocab_high: int, vocab_low: int = 0) -> np.ndarray:
    """Concatenated tokens of each id's block (``lengths[k]`` tokens of ``ids[k]``), in chunks of memory."""
    total = int(lengths.sum())
    out = np.empty(total, dtype=np.int32)
    owner = np.repeat(np.arange(ids.size), lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    with np.errstate(over="ignore"):
        key = _mix(np.asarray([seed], dtype=np.uint64) * _GOLD + np.uint64(0x5E7A))[0]
        for lo in range(0, total, CHUNK):
            hi = min(lo + CHUNK, total)
            k = owner[lo:hi]
            pos = np.arange(lo, hi, dtype=np.int64) - starts[k]
            x = _mix(key ^ _mix(ids[k].astype(np.uint64) * _GOLD + pos.astype(np.uint64)))
            out[lo:hi] = (x % np.uint64(vocab_high - vocab_low)).astype(np.int32) + vocab_low
    return out


def separate_siblings(first: np.ndarray, parents: np.ndarray, vocab_high: int, vocab_low: int = 0) -> np.ndarray:
    """Bump first tokens so that blocks with the same parent block start differently (while the vocabulary
    holds enough ids; beyond that, collisions are left and counted by the caller)."""
    out = first.copy()
    used: dict[int, set[int]] = {}
    for k in range(out.size):
        seen = used.setdefault(int(parents[k]), set())
        if len(seen) >= vocab_high - vocab_low:
            continue
        t = int(out[k])
        while t in seen:
            t = vocab_low + (t + 1 - vocab_low) % (vocab_high - vocab_low)
        seen.add(t)
        out[k] = t
    return out
