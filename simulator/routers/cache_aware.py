"""SGLang's cache-aware router (``sglang-router`` 0.3.2 = lightseekorg/smg@c7f9bf9f, ``src/policies/cache_aware.rs``,
``CacheAwarePolicy::select_worker``), defaults as ``python -m sglang_router.launch_router`` sets them
(``router_args.py``).

1. ``load`` = the router's in-flight requests per worker. Imbalanced iff ``max − min > balance_abs_threshold``
   and ``max > min × balance_rel_threshold``: then the least-loaded worker (ties → first).
2. Otherwise the prompt is matched against the router's tree; ``match_rate = matched / input``. Above
   ``cache_threshold`` (strictly) the request goes to a worker holding the deepest node reached; otherwise to
   the least-loaded worker (0.3.2; before smg PR #14650 a miss went to the smallest tree).
3. The prompt is inserted under the chosen worker either way. Every ``eviction_interval_secs`` each worker's
   share of the tree is cut to ``max_tree_size`` characters, least recently used leaves first.

Approximation (stated): the real tree holds characters of the request text; this one holds token ids, with
``token_chars`` converting ``max_tree_size``. Retries (the real router re-selects on a failed request)
do not arise: simulated replicas do not fail.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from simulator.request import Request
from simulator.routers.base import NoRequestState, RouterParams, View
from simulator.routers.tenant_tree import TenantTree


class CacheAwareParams(RouterParams):
    cache_threshold: float = Field(0.3, ge=0, le=1)
    balance_abs_threshold: int = Field(64, ge=0)
    balance_rel_threshold: float = Field(1.5, ge=1)
    eviction_interval_secs: float = Field(60.0, gt=0)
    max_tree_size: int = Field(2 ** 26, ge=1, description="characters per worker")
    token_chars: float = Field(4.0, gt=0, description="servetwin's conversion of max_tree_size to tokens")


class CacheAware(NoRequestState):
    name: ClassVar[str] = "cache_aware"
    Params: ClassVar[type[RouterParams]] = CacheAwareParams

    def __init__(self, params: CacheAwareParams, n: int, seed: int):
        self.params, self.n = params, n
        self.tree = TenantTree(n)
        self.next_eviction = params.eviction_interval_secs
        self.decisions = {"imbalanced": 0, "hit": 0, "miss": 0}

    def route(self, req: Request, view: View, now: float) -> int:
        p = self.params
        self._evict_due(now)
        hi, lo = max(view.in_flight), min(view.in_flight)
        if hi - lo > p.balance_abs_threshold and hi > lo * p.balance_rel_threshold:
            k, why = view.least_loaded(), "imbalanced"
        else:
            matched, owner = self.tree.match(req.prompt)
            rate = matched / req.prompt_len if req.prompt_len else 0.0
            if rate > p.cache_threshold and owner >= 0:
                k, why = owner, "hit"
            else:
                k, why = view.least_loaded(), "miss"
        self.decisions[why] += 1
        self.tree.insert(req.prompt, k)
        return k

    def _evict_due(self, now: float) -> None:
        if now < self.next_eviction:
            return
        limit = int(self.params.max_tree_size / self.params.token_chars)
        for t in range(self.n):
            self.tree.evict(t, limit)
        while self.next_eviction <= now:
            self.next_eviction += self.params.eviction_interval_secs

    def check_integrity(self) -> None:
        self.tree.check_integrity()
