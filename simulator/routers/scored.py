"""llm-d's inference scheduler (EPP) with its no-configuration profile (llm-d/llm-d-inference-scheduler@520af478,
``pkg/epp/config/loader/defaults.go``, ``pkg/epp/framework/plugins/scheduling/{scorer,picker}``): every replica
gets ``Σ weight · score`` with each score in [0, 1], and the highest wins, ties broken at random
(``max-score-picker`` shuffles, then sorts stably).

- ``queue-scorer`` (weight 2): ``(max_q − q) / (max_q − min_q)`` over replicas, 1 when all are equal; q is the
  replica's ``vllm:num_requests_waiting`` as last scraped (every ``scrape_interval_s``, 50 ms in llm-d).
- ``kv-cache-utilization-scorer`` (weight 2): ``1 − vllm:kv_cache_usage_perc`` as last scraped.
- ``prefix-cache-scorer`` (weight 3), the approximate one: the prompt cut into blocks of
  ``block_size_tokens`` (llm-d cuts 4 characters per token of text; this one cuts token ids, a stated
  approximation), chained hashes of at most ``max_prefix_blocks`` blocks; score = leading blocks the replica
  was sent before ÷ all blocks (0 below one block). The chosen replica's blocks are indexed after each pick,
  in a per-replica LRU of ``lru_capacity_per_server`` blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import ClassVar

import numpy as np
from pydantic import Field

from simulator.kernels import ROOT_HASH, chain_states
from simulator.request import Request
from simulator.routers.base import NoRequestState, RouterParams, View


class ScoredParams(RouterParams):
    queue_scorer: float = Field(2.0, ge=0, description="weight")
    kv_cache_utilization_scorer: float = Field(2.0, ge=0, description="weight")
    prefix_cache_scorer: float = Field(3.0, ge=0, description="weight")
    block_size_tokens: int = Field(16, ge=1)
    max_prefix_blocks: int = Field(256, ge=1)
    lru_capacity_per_server: int = Field(31250, ge=1)
    scrape_interval_s: float = Field(0.05, gt=0)
    seed: int = Field(0, ge=0, description="added to the trace's seed for the tie-breaking stream")


class Scored(NoRequestState):
    name: ClassVar[str] = "scored"
    Params: ClassVar[type[RouterParams]] = ScoredParams

    def __init__(self, params: ScoredParams, n: int, seed: int):
        self.params, self.n = params, n
        self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(102, params.seed)))
        self.index: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(n)]

    def _blocks(self, req: Request) -> list[int]:
        bs = self.params.block_size_tokens
        nb = min(req.prompt_len // bs, self.params.max_prefix_blocks)
        if nb == 0:
            return []
        return [int(h) for h in chain_states(req.prompt[:nb * bs], bs, ROOT_HASH)]

    def _prefix_scores(self, blocks: list[int]) -> list[float]:
        if not blocks:
            return [0.0] * self.n
        out = []
        for idx in self.index:
            m = 0
            while m < len(blocks) and blocks[m] in idx:
                m += 1
            out.append(m / len(blocks))
        return out

    @staticmethod
    def _queue_scores(q: list[int]) -> list[float]:
        hi, lo = max(q), min(q)
        return [1.0 if hi == lo else (hi - x) / (hi - lo) for x in q]

    def route(self, req: Request, view: View, now: float) -> int:
        p = self.params
        waiting, kv = view.scrape()
        blocks = self._blocks(req)
        pre, que = self._prefix_scores(blocks), self._queue_scores(waiting)
        total = [p.prefix_cache_scorer * pre[k] + p.queue_scorer * que[k]
                 + p.kv_cache_utilization_scorer * (1.0 - min(max(kv[k], 0.0), 1.0)) for k in range(self.n)]
        order = self.rng.permutation(self.n).tolist()
        k = max(order, key=lambda j: total[j])        # first maximum of the shuffled order
        self._remember(k, blocks)
        return int(k)

    def _remember(self, k: int, blocks: list[int]) -> None:
        idx = self.index[k]
        for h in blocks:
            idx[h] = None
            idx.move_to_end(h)
        while len(idx) > self.params.lru_capacity_per_server:
            idx.popitem(last=False)

    def check_integrity(self) -> None:
        assert all(len(i) <= self.params.lru_capacity_per_server for i in self.index), "an LRU over capacity"
