"""Benchmark: compile a trace of 100,000 requests at L = 4,096 (σ = 0.9). Target ≤ 10 s, ≤ 2 GiB peak."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import tempfile
import time

from scenarios import compile_trace, scenario_from_dict


def main(repeats: int = 3) -> dict:
    # 100,000 requests = 16,667 DAGs of 6: λ = 1 DAG/s, constant arrivals over 16,667 s
    sc = scenario_from_dict({"duration_s": 16667, "arrivals": {"kind": "gamma", "rate": 1.0},
                             "prompts": {"length": 4096, "sharing": 0.9}})
    times = []
    n = 0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            t = compile_trace(sc, d)
            times.append(time.perf_counter() - t0)
            n = t.n_requests
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    return {"bench": "compile", "requests": n, "median_s": statistics.median(times), "peak_rss_gib": peak}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
