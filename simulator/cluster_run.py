"""``simulate_cluster(trace, spec, …)`` → RunRecord: the trace served by a ``Cluster``.

The record is a single engine's record plus: ``replica`` per request, a ``replica`` column in the telemetry,
and ``meta["cluster"]`` (replica presets and resolved configurations, router name and resolved settings,
each replica's telemetry summary, and the router's own counts where it keeps them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pandas as pd
import simpy

from analysis.records import RunRecord, default_exclusion
from scenarios.trace import Trace
from simulator.cluster import Cluster, ClusterSpec
from simulator.cost_model import CostModel
from simulator.engine import Replica
from simulator.gc_window import fewer_collections
from simulator.presets import check_startup, resolve
from simulator.profiles import HardwareProfile, ModelProfile, load_hardware, load_model
from simulator.routers.registry import make_router
from simulator.schedulers.registry import make_scheduler
from simulator.simulate import _versions, full_extend_attention, graph_limit
from simulator.telemetry import Telemetry
from simulator.workload import DagDriver


def simulate_cluster(trace: Trace, spec: ClusterSpec, hardware: str | HardwareProfile = "l4",
                     model: str | ModelProfile = "llama-3.1-8b", context: int | None = 16384,
                     timeout_s: float = 300.0, record_tokens: bool = False, check_every: int = 0,
                     telemetry_interval_s: float = 1.0, fast_forward: bool = True) -> RunRecord:
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    mp = load_model(model) if isinstance(model, str) else model
    overrides = dict(spec.overrides)
    cfgs = [resolve(e, hw, mp, context, overrides) for e in spec.engines]
    longest = int((trace.prompt_lengths() + trace.arrays["max_tokens"]).max()) if trace.n_requests else 0
    for cfg in cfgs:
        check_startup(cfg, longest)
    router = make_router(spec.router, dict(spec.router_settings), spec.replicas, trace.seed)
    env = simpy.Environment()
    tels = [Telemetry(telemetry_interval_s, float(trace.scenario["duration_s"])) for _ in cfgs]
    cluster: Cluster
    replicas: list[Replica] = []
    for cfg, tel in zip(cfgs, tels, strict=True):
        sched = make_scheduler(cfg)
        cost = CostModel(hw, mp, sched.family, cfg.tensor_parallel_size, graph_limit(cfg),
                         full_extend_attention(cfg))
        replicas.append(Replica(env, sched, cost, tel, lambda r: cluster.finished(r), check_every,
                                fast_forward=fast_forward))
    cluster = Cluster(env, replicas, router, tels)
    driver = DagDriver(env, trace, cluster.submit, cluster.abort, timeout_s, record_tokens)
    cluster.on_finish = driver.finished
    cluster.check_every = check_every
    with fewer_collections():
        env.run()
    if check_every:
        cluster.check_integrity()
    return _record(trace, spec, cfgs, hw, mp, cluster, driver, env.now, timeout_s, record_tokens)


def _record(trace: Trace, spec: ClusterSpec, cfgs: list[Any], hw: HardwareProfile, mp: ModelProfile,
            cluster: Cluster, driver: DagDriver, end_s: float, timeout_s: float,
            record_tokens: bool) -> RunRecord:
    live = list(driver.requests.values())
    reqs = pd.DataFrame(driver.log.columns(live))
    reqs["replica"] = [cluster.where.get(i, -1) for i in range(trace.n_requests)]
    per, frames = replica_telemetry(cluster.replicas, cluster.tel, label=True)
    tel_frame = pd.concat(frames, ignore_index=True).sort_values(["t_s", "replica"], kind="stable")
    router = cluster.router
    meta = {
        "run_id": _run_id(trace, spec, cfgs, hw.name, mp.name), "source": "sim",
        "trace_digest": trace.digest, "scenario": trace.scenario, "seed": trace.seed,
        "engine": spec.engines[0] if len(set(spec.engines)) == 1 else "+".join(spec.engines),
        "engine_config": cfgs[0].model_dump(mode="json"), "hardware": hw.name, "model": mp.name,
        "offered_load_rps": float(trace.manifest["offered_load_rps"]),
        "run_window": {"start_s": 0.0, "duration_s": float(trace.scenario["duration_s"]), "end_s": float(end_s)},
        "exclusion": default_exclusion(), "request_timeout_s": timeout_s,
        "telemetry_summary": _sum_summaries(per), "versions": _versions(),
        "busy_s": sum(r.busy_s for r in cluster.replicas),
        "cluster": {"replicas": spec.replicas, "engines": list(spec.engines),
                    "engine_configs": [c.model_dump(mode="json") for c in cfgs],
                    "router": router.name, "router_settings": router.params.model_dump(mode="json"),
                    "router_counts": dict(getattr(router, "decisions", {})), "per_replica": per},
    }
    chunks = pd.DataFrame(driver.log.chunks(live)) if record_tokens else None
    return RunRecord(meta=meta, requests=reqs, telemetry=tel_frame.reset_index(drop=True), chunks=chunks)


def replica_telemetry(replicas: list[Replica], tels: list[Telemetry],
                      label: bool) -> tuple[list[dict[str, float]], list[pd.DataFrame]]:
    """Each replica's telemetry summary (with its busy time) and series (with a ``replica`` column if ``label``)."""
    per, frames = [], []
    for k, (rep, tel) in enumerate(zip(replicas, tels, strict=True)):
        c = rep.sched.counters
        per.append({**tel.summary(c.preemptions, c.prefix_hit_tokens, c.prefix_query_tokens), "busy_s": rep.busy_s})
        f = tel.frame()
        if label:
            f.insert(0, "replica", k)
        frames.append(f)
    return per, frames


def _sum_summaries(per: list[dict[str, float]]) -> dict[str, float]:
    hits = sum(p["prefix_hit_tokens"] for p in per)
    queries = sum(p["prefix_query_tokens"] for p in per)
    return {"kv_usage_peak": max(p["kv_usage_peak"] for p in per),
            "kv_usage_mean": sum(p["kv_usage_mean"] for p in per) / len(per),
            "waiting_peak": max(p["waiting_peak"] for p in per), "running_peak": max(p["running_peak"] for p in per),
            "preemptions": sum(p["preemptions"] for p in per), "prefix_hit_tokens": hits,
            "prefix_query_tokens": queries, "prefix_hit_fraction": hits / queries if queries else 0.0,
            "steps": sum(p["steps"] for p in per), **_sum_windows(per)}


def _sum_windows(per: list[dict[str, float]]) -> dict[str, float]:
    """The replicas' run-window figures, combined as the whole run's are (peaks: the largest; counts: the sum)."""
    if not all("preemptions_window" in p for p in per):
        return {}
    return {"kv_usage_peak_window": max(p["kv_usage_peak_window"] for p in per),
            "waiting_peak_window": max(p["waiting_peak_window"] for p in per),
            "preemptions_window": sum(p["preemptions_window"] for p in per)}


def _run_id(trace: Trace, spec: ClusterSpec, cfgs: list[Any], hw: str, model: str) -> str:
    blob = json.dumps([trace.digest, list(spec.engines), [c.model_dump(mode="json") for c in cfgs], hw, model,
                       spec.router, sorted(spec.router_settings)], sort_keys=True, default=str)
    tag = spec.engines[0] if len(set(spec.engines)) == 1 else "mixed"
    return f"sim-{tag}-x{spec.replicas}-{spec.router}-s{trace.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
