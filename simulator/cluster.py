"""A cluster: N simulated replicas (any engine preset each) behind a router, on one simulated clock.

The trace's driver hands each issued request to the cluster; the router picks a replica from what it can
see (``simulator.routers.base.View``); the request reaches that replica ``latency_s`` later. A request's
completion (or failure) is reported to the router before the driver releases its dependants. Telemetry is
kept per replica; the run's summary adds replicas up (peaks are the highest replica's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import simpy

from simulator.engine import Replica
from simulator.request import Request
from simulator.routers.base import Router, View
from simulator.telemetry import Telemetry


@dataclass(frozen=True)
class ClusterSpec:
    """What a cluster is: one engine preset per replica (with its overrides), a router and its settings."""

    engines: tuple[str, ...]
    router: str = "round_robin"
    router_settings: tuple[tuple[str, Any], ...] = ()
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def replicas(self) -> int:
        return len(self.engines)


class Cluster:
    def __init__(self, env: simpy.Environment, replicas: list[Replica], router: Router,
                 telemetry: list[Telemetry]):
        self.env, self.replicas, self.router, self.tel = env, replicas, router, telemetry
        self.view = View(len(replicas), [0] * len(replicas), self._scrape)
        self.where: dict[int, int] = {}          # request index → replica
        self.transit: set[int] = set()           # routed, still inside the router's latency
        self.done: set[int] = set()
        self._scraped_at = -1.0
        self._scraped: tuple[list[int], list[float]] = ([], [])
        self.on_finish: Any = None
        self.check_every = 0                     # check the bookkeeping every this many finished requests

    def _scrape(self) -> tuple[list[int], list[float]]:
        """The replicas' waiting counts and KV usage as their metrics endpoints last reported them."""
        every = getattr(self.router.params, "scrape_interval_s", 0.0)
        now = self.env.now
        if self._scraped_at < 0 or now - self._scraped_at >= every:
            for r in self.replicas:
                r.settle()
            stamp = now if every <= 0 else now - (now % every)
            self._scraped_at = stamp
            self._scraped = ([len(r.sched.waiting) for r in self.replicas],
                             [r.sched.kv_usage() for r in self.replicas])
        return self._scraped

    def submit(self, req: Request) -> None:
        k = self.router.route(req, self.view, self.env.now)
        if not 0 <= k < len(self.replicas):
            raise RuntimeError(f"router {self.router.name} chose replica {k} of {len(self.replicas)}")
        self.where[req.idx] = k
        self.view.in_flight[k] += 1
        lat = self.router.params.latency_s
        if lat <= 0:
            self.replicas[k].submit(req)
            return
        self.transit.add(req.idx)
        self.env.timeout(lat).callbacks.append(lambda _e: self._arrive(req, k))

    def _arrive(self, req: Request, k: int) -> None:
        self.transit.discard(req.idx)
        if not req.error:
            self.replicas[k].submit(req)

    def abort(self, req: Request) -> None:
        if req.idx in self.transit:                # timed out inside the router
            req.error = "timeout"
            self.transit.discard(req.idx)
            self.finished(req)
            return
        self.replicas[self.where[req.idx]].abort(req)

    def finished(self, req: Request) -> None:
        if req.idx in self.done:
            return
        self.done.add(req.idx)
        k = self.where[req.idx]
        self.view.in_flight[k] -= 1
        self.router.finished(req, k, self.env.now)
        if self.check_every and len(self.done) % self.check_every == 0:
            self.check_integrity()
        self.on_finish(req)

    def check_integrity(self) -> None:
        assert all(x >= 0 for x in self.view.in_flight), "negative in-flight count"
        assert sum(self.view.in_flight) == len(self.where) - len(self.done), "in-flight counts drifted"
        self.router.check_integrity()
