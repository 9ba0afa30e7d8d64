"""Benchmark: an 8-replica L4 cluster behind each router on the study's workload at λ = 0.28 DAG/s per replica
(σ 0.9, L 4,096, 8 prefix groups), up to 100,000 requests: simulated seconds per wall second on one core
(target ≥ 1,000×) and peak memory; then the Mooncake conversation trace's first 15 minutes at a quarter of its rate
on 8 H100 replicas behind cache_aware, both engines."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from scenarios import compile_trace, scenario_from_dict
from simulator import native
from simulator.cluster import ClusterSpec
from simulator.cluster_run import simulate_cluster

ENGINE = ("sglang-0.4.1", {"mem_fraction_static": 0.85})
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def cluster(requests: int, router: str) -> dict:
    rate = 0.28 * 8
    duration = requests / (6 * rate)
    t = compile_trace(scenario_from_dict({"duration_s": duration, "arrivals": {"rate": rate},
                                          "prompts": {"length": 4096, "sharing": 0.9, "prefix_groups": 8}}))
    spec = ClusterSpec((ENGINE[0],) * 8, router, (), tuple(ENGINE[1].items()))
    t0 = time.perf_counter()
    rec = simulate_cluster(t, spec, "l4")
    w = time.perf_counter() - t0
    sim_s = float(rec.meta["run_window"]["end_s"])
    return {"bench": "cluster-8", "router": router, "requests": t.n_requests, "wall_s": round(w, 2),
            "x_realtime_per_core": round(sim_s / w, 1), "requests_per_wall_s": round(t.n_requests / w, 1),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3),
            "modules": native.status()["mode"]}


def mooncake() -> list[dict]:
    from scenarios.importers import ImportOptions, import_trace
    w = import_trace(SAMPLE, ImportOptions("mooncake", window=(0.0, 900.0), rate_scale=0.25))
    out = []
    for engine, over in (("vllm-0.6.3", {"enable_prefix_caching": True}), ("sglang-0.4.1", {})):
        t0 = time.perf_counter()
        rec = simulate_cluster(w, ClusterSpec((engine,) * 8, "cache_aware", (), tuple(over.items())), "h100",
                               context=131072)
        out.append({"bench": "mooncake-15min-8xh100", "engine": engine, "requests": w.n_requests,
                    "wall_s": round(time.perf_counter() - t0, 2),
                    "prefix_hit_fraction": round(rec.meta["telemetry_summary"]["prefix_hit_fraction"], 3)})
    return out


def mooncake_l4() -> list[dict]:
    """The requests of the first 5 minutes that fit an L4's 16,384-token context (docs/traces.md): at 0.04 of the
    rate on one L4, and at 8 times that load (0.32) on 8 L4s behind cache_aware."""
    from scenarios.importers import ImportOptions, import_trace
    out = []
    for n, scale in ((1, 0.04), (8, 0.32)):
        w = import_trace(SAMPLE, ImportOptions("mooncake", window=(0.0, 300.0), rate_scale=scale, max_len=16384))
        for engine, over in (("vllm-0.6.3", {"enable_prefix_caching": True}), ("sglang-0.4.1", {})):
            t0 = time.perf_counter()
            rec = simulate_cluster(w, ClusterSpec((engine,) * n, "cache_aware", (), tuple(over.items())), "l4")
            ok = rec.requests[rec.requests["ok"]]
            out.append({"bench": f"mooncake-5min-{n}xl4", "engine": engine, "requests": w.n_requests,
                        "wall_s": round(time.perf_counter() - t0, 2),
                        "prefix_hit_fraction": round(rec.meta["telemetry_summary"]["prefix_hit_fraction"], 3),
                        "ttft_p50_s": round(float((ok["first_token_s"] - ok["send_s"]).median()), 2)})
    return out


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    for router in ("round_robin", "cache_aware"):
        print(json.dumps(cluster(n, router)), flush=True)
    for row in mooncake() + mooncake_l4():
        print(json.dumps(row), flush=True)
