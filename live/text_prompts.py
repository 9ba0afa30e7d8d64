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
        prefix = [int(x) for x in trace.arrays["prefix"]]
        self.prefix = exact_segment(self.tok, prefix, len(prefix), self.rng) if prefix else ("", [])
        self.cache: dict[int, str] = {}

    def __call__(self, i: int) -> str:
        if i not in self.cache:
            ids = [int(x) for x in self.trace.prompt(i)]
            F = len(self.prefix[1])
            if F:
                p, s = exact_pair(self.tok, ids[:F], ids[F:], self.rng, self.prefix)
                self.cache[i] = p + s
            else:
                self.cache[i] = exact_segment(self.tok, ids, len(ids), self.rng)[0]
        return self.cache[i]
