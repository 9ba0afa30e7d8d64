"""Benchmark: import the whole Mooncake conversation trace (12,031 requests, 145M prompt tokens) and write it;
then simulate its first 15 minutes at a quarter of the rate on one H100 (both engines). Targets: import ≤ 10 s
and ≤ 2 GiB peak."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scenarios.importers import ImportOptions, import_trace

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def main(repeats: int = 3) -> dict:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            t = import_trace(SAMPLE, ImportOptions("mooncake"), Path(d) / "t")
            times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    out = {"bench": "import-mooncake", "requests": t.n_requests, "median_s": statistics.median(times),
           "peak_rss_gib": peak}
    from simulator import simulate
    w = import_trace(SAMPLE, ImportOptions("mooncake", window=(0.0, 900.0), rate_scale=0.25))
    for engine, over in (("vllm-0.6.3", {"enable_prefix_caching": True}), ("sglang-0.4.1", {})):
        t0 = time.perf_counter()
        rec = simulate(w, engine, "h100", context=131072, overrides=over)
        out[f"simulate_15min_h100_{engine}_s"] = round(time.perf_counter() - t0, 2)
        out[f"simulate_15min_h100_{engine}_requests"] = int(rec.requests.shape[0])
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
