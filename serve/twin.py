"""The simulated engine a server drives online: the same replica (or cluster) as ``servetwin simulate``, on a
SimPy clock that the server moves forward as wall time passes (``serve.clock``).

Requests enter at the virtual time they arrive (``submit``); ``run_until(v)`` processes every simulated event up
to virtual time ``v`` and hands each token to its request's stream as the step that produced it ends. The
simulation never runs ahead of the clock, so a request that arrives later is scheduled exactly as
``simulate`` would schedule it had the trace held it: the served requests written as a trace (``served_trace``)
and simulated give the same per-request times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from foundation.errors import SpecError
from simulator.cluster import Cluster, ClusterSpec
from simulator.config import EngineConfig
from simulator.cost_model import CostModel
from simulator.engine import Replica
from simulator.presets import check_startup, resolve
from simulator.profiles import HardwareProfile, ModelProfile, load_hardware, load_model
from simulator.request import Request
from simulator.routers.registry import make_router
from simulator.schedulers.base import Scheduler
from simulator.schedulers.registry import make_scheduler
from simulator.simulate import full_extend_attention, graph_limit
from simulator.telemetry import Telemetry

Sink = Callable[[Request, float], None]


@dataclass(frozen=True)
class TwinSpec:
    """What the server simulates: one preset per replica, their overrides, the router behind them."""

    cluster: ClusterSpec
    hardware: str = "l4"
    model: str = "llama-3.1-8b"
    context: int | None = 16384
    telemetry_interval_s: float = 1.0


class Twin:
    def __init__(self, spec: TwinSpec, sink: Sink, check_every: int = 0):
        self.spec = spec
        self.hw: HardwareProfile = load_hardware(spec.hardware)
        self.mp: ModelProfile = load_model(spec.model)
        overrides = dict(spec.cluster.overrides)
        self.cfgs: list[EngineConfig] = [resolve(e, self.hw, self.mp, spec.context, overrides)
                                         for e in spec.cluster.engines]
        for cfg in self.cfgs:
            check_startup(cfg, 1)
        self.env = simpy.Environment()
        self.sink = sink
        self.on_done: Callable[[Request], None] | None = None   # a request finished, failed or was aborted
        self.aborted: set[int] = set()                           # requests whose client went away (by idx)
        self.tels = [Telemetry(spec.telemetry_interval_s) for _ in self.cfgs]
        self.replicas: list[Replica] = []
        for cfg, tel in zip(self.cfgs, self.tels, strict=True):
            sched = make_scheduler(cfg)
            cost = CostModel(self.hw, self.mp, sched.family, cfg.tensor_parallel_size, graph_limit(cfg),
                             full_extend_attention(cfg))
            if cost.front_end_loop is not None or cost.delivery_latency > 0:
                raise SpecError(f"--hardware {spec.hardware}: a profile with a fitted front end (a CPU instance's "
                                "calibration) cannot be served; serve a GPU profile (l4, h100, a100-80g, …)")
            # step by step: a fast-forwarded run would emit its tokens before the clock reaches them
            self.replicas.append(Replica(self.env, sched, cost, tel, self._finished, check_every, fast_forward=False))
        self.cluster: Cluster | None = None
        if self.routed:
            c = spec.cluster
            router = make_router(c.router, dict(c.router_settings), c.replicas, 0)
            self.cluster = Cluster(self.env, self.replicas, router, self.tels)
            self.cluster.on_finish = self._done
            for rep in self.replicas:
                rep.on_finish = self.cluster.finished
        self.requests: list[Request] = []
        self.prompts: list[np.ndarray] = []         # kept: a finished request drops its own copy

    @property
    def routed(self) -> bool:
        c = self.spec.cluster
        return c.replicas > 1 or c.router != "round_robin" or bool(c.router_settings)

    @property
    def context_limit(self) -> int:
        cfg = self.cfgs[0]
        limit = getattr(cfg, "max_model_len", None) or getattr(cfg, "context_length", None)
        return int(limit or self.mp.max_context)

    @property
    def family(self) -> str:
        return self.schedulers[0].family

    @property
    def schedulers(self) -> list[Scheduler]:
        return [r.sched for r in self.replicas]

    # --- the clock -------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        return float(self.env.now)

    def next_event(self) -> float:
        return float(self.env.peek())

    def run_until(self, v: float) -> None:
        """Process every simulated event at or before virtual time ``v``."""
        env = self.env
        while env.peek() <= v:
            env.step()

    def move_to(self, v: float) -> None:
        """Process everything up to ``v`` and stand the clock at ``v`` (an arrival's instant)."""
        self.run_until(v)
        if v > self.env.now:
            self.env.run(until=v)

    # --- requests --------------------------------------------------------------------------------
    def submit(self, prompt: np.ndarray, max_tokens: int, v: float) -> Request:
        """A request arriving at virtual time ``v`` (≥ every earlier arrival's)."""
        self.move_to(max(v, self.now))
        now = self.now
        idx = len(self.requests)
        r = Request(idx, idx, "turn", prompt.astype(np.int32, copy=False), int(max_tokens), now, now, idx, True)
        r.sink = self.sink                            # each token reaches its stream as the step emitting it ends
        self.requests.append(r)
        self.prompts.append(r.prompt)
        if self.cluster is not None:
            self.cluster.submit(r)
        else:
            self.replicas[0].submit(r)
        return r

    def abort(self, r: Request) -> None:
        """The client went away: the engine drops the request (as both engines abort a closed stream)."""
        if r.is_finished or r.error or r.idx in self.aborted:
            return
        self.aborted.add(r.idx)
        if self.cluster is not None:
            self.cluster.abort(r)
        else:
            self.replicas[0].abort(r)

    def _finished(self, r: Request) -> None:
        if self.cluster is None:
            self._done(r)

    def _done(self, r: Request) -> None:
        if r.idx in self.aborted and r.error == "timeout":
            r.error = "aborted by the client"
        if self.on_done is not None:
            self.on_done(r)

    def check_integrity(self) -> None:
        for s in self.schedulers:
            s.check_integrity()
        if self.cluster is not None:
            self.cluster.check_integrity()
