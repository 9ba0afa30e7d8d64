"""Text prompts for chat endpoints: each request's prompt as text whose encoding has exactly the
trace's token counts (shared prefix corrected once, each suffix against it)."""

from __future__ import annotations

import numpy as np

from scenarios.text import exact_pair, exact_segment, load_tokenizer
from scenarios.trace import Trace


class TextPrompts:
    def __init__(self, trace: Trace, tokenizer_dir: str):
        self.trace = trace
        self.tok = load_tokenizer(tokenizer_dir)
        self.rng = np.random.default_rng(trace.seed)
        self.F = trace.shared_prefix_len
        self.prefixes: dict[int, tuple[str, list[int]]] = {}   # per prefix group, its text (made once)
        self.cache: dict[int, str] = {}

    def _prefix(self, group: int) -> tuple[str, list[int]]:
        if group not in self.prefixes:
            ids = [int(x) for x in self.trace.arrays["prefix"][group * self.F:(group + 1) * self.F]]
            self.prefixes[group] = exact_segment(self.tok, ids, len(ids), self.rng)
        return self.prefixes[group]

    def __call__(self, i: int) -> str:
        if i not in self.cache:
            ids = [int(x) for x in self.trace.prompt(i)]
            F = self.F
            if F:
                p, s = exact_pair(self.tok, ids[:F], ids[F:], self.rng, self._prefix(self.trace.prefix_group(i)))
                self.cache[i] = p + s
            else:
                self.cache[i] = exact_segment(self.tok, ids, len(ids), self.rng)[0]
        return self.cache[i]
