"""Fleet sizing: the fewest replicas behind a router that keep pace with a workload at a rate and meet a
latency objective (``--slo ttft_p95=2.0``), per router.

A replica count meets the objective when its runs keep pace (the study's rule, ``simulator.capacity``) and,
for every objective metric, the geometric mean over the seeds is at most the target. The search doubles the
replica count from 1 until one meets it (up to ``max_replicas``), then bisects between the last count that
failed and the first that met it; it assumes that more replicas never hurt, which the record lets a reader
check (``tried`` keeps every count's values). Metrics and the keeps-pace fraction are the caller's, as in
``simulator.capacity``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analysis.stats import geomean
from scenarios.compiler import compile_trace
from scenarios.spec import Scenario
from simulator.capacity import Measure
from simulator.cluster import ClusterSpec
from simulator.cluster_run import simulate_cluster
from simulator.profiles import HardwareProfile, ModelProfile


@dataclass(frozen=True)
class Trial:
    replicas: int
    meets: bool
    keeps: bool
    values: dict[str, float]                    # objective metric → geometric mean over the seeds
    per_seed: dict[str, list[float]]            # objective metric → one value per seed (for paired comparison)


@dataclass(frozen=True)
class Sizing:
    router: str
    replicas: int | None                        # None: even max_replicas does not meet the objective
    tried: dict[int, Trial] = field(default_factory=dict)


def _trial(sc: Scenario, rate: float, spec: ClusterSpec, slo: dict[str, float], seeds: tuple[int, ...],
           hardware: str | HardwareProfile, model: str | ModelProfile, context: int | None, measure: Measure,
           keeps_fraction: float) -> Trial:
    ms = []
    for seed in seeds:
        s = sc.model_copy(update={"seed": seed, "arrivals": sc.arrivals.model_copy(update={"rate": rate})})
        ms.append(measure(simulate_cluster(compile_trace(s), spec, hardware, model, context)))
    x = geomean([m["throughput"] for m in ms]) if all(m["throughput"] > 0 for m in ms) else 0.0
    realised = geomean([m["realised_load"] for m in ms]) if all(m["realised_load"] > 0 for m in ms) else 0.0
    keeps = x >= keeps_fraction * min(ms[0]["offered_load"], realised)
    per_seed = {k: [float(m[k]) for m in ms] for k in slo}
    values = {k: geomean(v) if all(x > 0 for x in v) else float("inf") for k, v in per_seed.items()}
    meets = keeps and all(values[k] <= t for k, t in slo.items())
    return Trial(spec.replicas, meets, keeps, values, per_seed)


def size_fleet(sc: Scenario, rate: float, engine: str, router: str, slo: dict[str, float], *,
               seeds: tuple[int, ...] = (1, 2, 3), hardware: str | HardwareProfile = "l4",
               model: str | ModelProfile = "llama-3.1-8b", overrides: dict[str, Any] | None = None,
               router_settings: dict[str, Any] | None = None, context: int | None = 16384,
               max_replicas: int = 64, measure: Measure, keeps_fraction: float) -> Sizing:
    tried: dict[int, Trial] = {}

    def meets(n: int) -> bool:
        spec = ClusterSpec((engine,) * n, router, tuple(sorted((router_settings or {}).items())),
                           tuple(sorted((overrides or {}).items())))
        tried[n] = _trial(sc, rate, spec, slo, seeds, hardware, model, context, measure, keeps_fraction)
        return tried[n].meets
    n = 1
    while not meets(n):
        if n >= max_replicas:
            return Sizing(router, None, dict(sorted(tried.items())))
        n = min(2 * n, max_replicas)
    lo, hi = n // 2, n                        # lo failed (or is 0), hi meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return Sizing(router, hi, dict(sorted(tried.items())))
