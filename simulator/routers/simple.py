"""Load-blind and load-only routers.

- ``round_robin``: a counter modulo the replica count (sglang-router ``src/policies/round_robin.rs``; Vidur
  ``round_robin_global_scheduler.py``).
- ``random``: uniform over replicas, from a seeded stream (sglang-router ``random.rs``; Vidur ``random``).
- ``least_outstanding``: the fewest requests the router has in flight (dispatched, not finished); ties to the
  first replica. Vidur's ``lor`` counts only requests *waiting* in each replica's queue, which its router can
  read because it is in-process; a real HTTP router knows only its own in-flight count, which is what this
  one uses.
- ``session``: every request of a DAG (an agent graph or a chat session) goes where its DAG's first request
  went; a DAG's first request goes to the least-outstanding replica (sticky sessions, as a router keyed on
  a session header such as sglang-router's ``manual`` policy with ``x-smg-routing-key`` does).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from simulator.request import Request
from simulator.routers.base import NoRequestState, RouterParams, View


class RoundRobin(NoRequestState):
    name: ClassVar[str] = "round_robin"
    Params: ClassVar[type[RouterParams]] = RouterParams

    def __init__(self, params: RouterParams, n: int, seed: int):
        self.params, self.n, self.next = params, n, 0

    def route(self, req: Request, view: View, now: float) -> int:
        k = self.next % self.n
        self.next += 1
        return k

    def check_integrity(self) -> None:
        assert self.next >= 0


class RandomParams(RouterParams):
    seed: int = Field(0, ge=0, description="added to the trace's seed for the router's own stream")


class Random(NoRequestState):
    name: ClassVar[str] = "random"
    Params: ClassVar[type[RouterParams]] = RandomParams

    def __init__(self, params: RandomParams, n: int, seed: int):
        self.params, self.n = params, n
        self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(101, params.seed)))

    def route(self, req: Request, view: View, now: float) -> int:
        return int(self.rng.integers(0, self.n))


class LeastOutstanding(NoRequestState):
    name: ClassVar[str] = "least_outstanding"
    Params: ClassVar[type[RouterParams]] = RouterParams

    def __init__(self, params: RouterParams, n: int, seed: int):
        self.params, self.n = params, n

    def route(self, req: Request, view: View, now: float) -> int:
        return view.least_loaded()


class Session:
    name: ClassVar[str] = "session"
    Params: ClassVar[type[RouterParams]] = RouterParams

    def __init__(self, params: RouterParams, n: int, seed: int):
        self.params, self.n = params, n
        self.home: dict[int, int] = {}       # DAG id → replica
        self.open: dict[int, int] = {}       # DAG id → its requests in flight (the entry is dropped at 0)

    def route(self, req: Request, view: View, now: float) -> int:
        k = self.home.get(req.dag)
        if k is None:
            k = self.home[req.dag] = view.least_loaded()
        self.open[req.dag] = self.open.get(req.dag, 0) + 1
        return k

    def finished(self, req: Request, replica: int, now: float) -> None:
        self.open[req.dag] -= 1
        if not self.open[req.dag]:
            del self.open[req.dag]

    def check_integrity(self) -> None:
        assert all(v > 0 for v in self.open.values()), "a DAG with no request in flight is still open"
        assert set(self.open) <= set(self.home), "an open DAG has no home replica"
