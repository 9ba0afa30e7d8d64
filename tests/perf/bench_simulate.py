"""Benchmark: simulated seconds per wall second and requests per wall second, one core, on the
reference rate-sweep condition (λ = 0.28, σ = 0.9, L = 4,096, 600 s), both engines under the study's
defaults arm; linearity in trace length; peak memory of `servetwin simulate --trace` on 10,000 and 100,000
requests (`bench_simulate.py memory 1000000` for a million: about 8 minutes)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scenarios import compile_trace, scenario_from_dict, write_trace
from simulator import native, simulate

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
                    "wall_s": w, "x_realtime": sim_s / w, "requests_per_wall_s": t.n_requests / w,
                    "modules": native.status()["mode"]})
    return out


def memory(requests: int) -> dict:
    """Peak memory of ``servetwin simulate --trace`` (validation, simulation, the run written) in its own process,
    on a compiled trace of about ``requests`` requests (H100, λ = 1 DAG/s, σ 0.9, L 4,096; SGLang 0.4.1). The
    compile runs here, not in the measured process."""
    with tempfile.TemporaryDirectory() as tmp:
        t = compile_trace(scenario_from_dict({"duration_s": requests / 6.0, "arrivals": {"rate": 1.0},
                                              "prompts": {"length": 4096, "sharing": 0.9}}))
        write_trace(t, Path(tmp) / "trace")
        n = t.n_requests
        del t
        args = ["simulate", "--trace", str(Path(tmp) / "trace"), "--engine", "sglang-0.4.1", "--hardware", "h100",
                "--set", "mem_fraction_static=0.85", "--out", str(Path(tmp) / "run")]
        # the process's own high-water mark (VmHWM: its memory since exec; ru_maxrss would carry this one's over)
        code = ("import sys\nfrom servetwin.cli import main\nrc = main(sys.argv[1:])\n"
                "hwm = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
                "print('peak_kib', hwm, file=sys.stderr)\nraise SystemExit(rc)")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
        w = time.perf_counter() - t0
    peak = int(done.stderr.rsplit("peak_kib", 1)[1].split()[0]) / 1024 ** 2
    return {"bench": "simulate-memory", "requests": n, "wall_s": round(w, 1), "peak_rss_gib": round(peak, 3)}


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "speed"
    if what == "memory":
        for n in [int(x) for x in sys.argv[2:]] or [10_000, 100_000]:
            print(json.dumps(memory(n)), flush=True)
    else:
        for d in (600.0, 1200.0, 2400.0):
            for row in speed(d):
                print(json.dumps(row))
