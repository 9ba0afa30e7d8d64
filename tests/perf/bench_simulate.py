"""Benchmark: simulated seconds per wall second and requests per wall second, one core, on the
reference rate-sweep condition (λ = 0.28, σ = 0.9, L = 4,096, 600 s), both engines under the study's
defaults arm; linearity in trace length; peak memory on a 100,000-request trace."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time

from scenarios import compile_trace, scenario_from_dict
from simulator import simulate

ENGINES = {"vllm-0.6.3": {"enable_prefix_caching": True, "gpu_memory_utilization": 0.88},
           "sglang-0.4.1": {"mem_fraction_static": 0.85}}


def speed(duration: float, rate: float = 0.28, repeats: int = 3) -> list[dict]:
    t = compile_trace(scenario_from_dict({"duration_s": duration, "arrivals": {"rate": rate},
                                          "prompts": {"length": 4096, "sharing": 0.9}}))
    out = []
    for eng, over in ENGINES.items():
        simulate(t, eng, overrides=over)          # warm up (imports, power tables)
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            rec = simulate(t, eng, overrides=over)
            walls.append(time.perf_counter() - t0)
        w = statistics.median(walls)
        sim_s = float(rec.meta["run_window"]["end_s"])
        out.append({"bench": "simulate", "engine": eng, "trace_s": duration, "requests": t.n_requests,
                    "wall_s": w, "x_realtime": sim_s / w, "requests_per_wall_s": t.n_requests / w})
    return out


def memory_100k() -> dict:
    t = compile_trace(scenario_from_dict({"duration_s": 16667, "arrivals": {"rate": 1.0},
                                          "prompts": {"length": 4096, "sharing": 0.9}}))
    t0 = time.perf_counter()
    simulate(t, "sglang-0.4.1", hardware="h100", overrides={"mem_fraction_static": 0.85})
    w = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    return {"bench": "simulate-100k", "requests": t.n_requests, "wall_s": w, "peak_rss_gib": peak}


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "speed"
    if what == "memory":
        print(json.dumps(memory_100k()))
    else:
        for d in (600.0, 1200.0, 2400.0):
            for row in speed(d):
                print(json.dumps(row))
