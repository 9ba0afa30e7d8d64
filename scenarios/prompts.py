"""L3 prompt tokens: the shared prefix, per-DAG contexts, unique suffixes and synthetic chain outputs."""

from __future__ import annotations

import hashlib

import numpy as np

from foundation.errors import SpecError
from scenarios.spec import Prompts


class TokenSampler:
    """Uniform token ids from [vocab_low, vocab_high) minus ``exclude`` (special tokens)."""

    def __init__(self, spec: Prompts):
        self.low, self.high = spec.vocab_low, spec.vocab_high
        ex = sorted(set(spec.exclude))
        self.allowed: np.ndarray | None = None
        if ex:
            ids = np.arange(self.low, self.high, dtype=np.int64)
            self.allowed = ids[~np.isin(ids, ex)].astype(np.int32)

    @property
    def size(self) -> int:
        return int(self.allowed.size) if self.allowed is not None else self.high - self.low

    def draw(self, rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
        if self.allowed is None:
            return rng.integers(self.low, self.high, size=shape, dtype=np.int32)
        return self.allowed[rng.integers(0, self.allowed.size, size=shape)]


def row_keys(rows: np.ndarray) -> list[bytes]:
    return [hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in rows]


def distinct_rows(rows: np.ndarray, sampler: TokenSampler, rng: np.random.Generator) -> np.ndarray:
    """Redraw (deterministically) any row equal to an earlier row until all rows are distinct."""
    n, d = rows.shape
    if n > 1 and d * np.log(max(sampler.size, 2)) < np.log(n) + 1:
        raise SpecError(f"prompts: {n} distinct suffixes of {d} tokens cannot be drawn from a "
                        f"vocabulary of {sampler.size} ids; raise suffix length or vocabulary")
    for _ in range(1000):
        seen: set[bytes] = set()
        dup = []
        for i, k in enumerate(row_keys(rows)):
            if k in seen:
                dup.append(i)
            seen.add(k)
        if not dup:
            return rows
        rows[dup] = sampler.draw(rng, (len(dup), d))
    raise SpecError("prompts: could not draw distinct suffixes; raise suffix length or vocabulary")
