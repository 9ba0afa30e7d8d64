"""Capacity search: the largest offered load an engine configuration keeps pace with, by bisection over
the DAG arrival rate, every seed required to keep pace. Reported as a bracket [keeps, falls behind]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analysis.metrics import run_metrics
from scenarios.compiler import compile_trace
from scenarios.spec import Scenario
from simulator.profiles import HardwareProfile, ModelProfile
from simulator.simulate import simulate


@dataclass(frozen=True)
class Capacity:
    keeps_rate: float          # highest DAG rate at which every seed kept pace
    fails_rate: float          # lowest DAG rate at which some seed fell behind
    requests_per_dag: float

    @property
    def keeps_load(self) -> float:
        return self.keeps_rate * self.requests_per_dag

    @property
    def fails_load(self) -> float:
        return self.fails_rate * self.requests_per_dag


def keeps_pace(sc: Scenario, rate: float, engine: str, hardware: str | HardwareProfile,
               model: str | ModelProfile, overrides: dict[str, Any] | None, seeds: tuple[int, ...],
               context: int | None) -> bool:
    for seed in seeds:
        s = sc.model_copy(update={"seed": seed, "arrivals": sc.arrivals.model_copy(update={"rate": rate})})
        rec = simulate(compile_trace(s), engine, hardware, model, overrides, context)
        if not run_metrics(rec)["keeps_pace"]:
            return False
    return True


def capacity_search(sc: Scenario, engine: str, hardware: str | HardwareProfile = "l4",
                    model: str | ModelProfile = "llama-3.1-8b", overrides: dict[str, Any] | None = None,
                    lo: float = 0.01, hi: float = 2.0, seeds: tuple[int, ...] = (1, 2, 3), rel_tol: float = 0.03,
                    context: int | None = 16384) -> Capacity:
    def ok(rate: float) -> bool:
        return keeps_pace(sc, rate, engine, hardware, model, overrides, seeds, context)
    while not ok(lo):
        lo /= 2
        if lo < 1e-4:
            raise ValueError("capacity_search: the engine falls behind even at a vanishing rate")
    while ok(hi):
        lo, hi = hi, hi * 2
    while (hi - lo) / hi > rel_tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    n = compile_trace(sc.model_copy(update={"duration_s": max(sc.duration_s, 60.0)}))
    return Capacity(lo, hi, n.n_requests / max(n.n_dags, 1))
