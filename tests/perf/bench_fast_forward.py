"""Benchmark: decode fast-forward against the step-by-step reference mode, alternating in one process (median of
3 each): the study's λ = 0.28 trace (σ 0.9, L 4,096, 600 s) on both engines' L4 twins, and Vidur's own workload
(fixed 4,096-token prompts, 128 outputs, Poisson 1.7 requests/s, unshared, one A100-80GB, vLLM 0.6.3) over 600 and
6,000 s. Reported: wall seconds each way, their ratio, simulated seconds per wall second with fast-forward."""

from __future__ import annotations

import json
import statistics
import time

from scenarios import compile_trace, scenario_from_dict
from simulator import simulate

STUDY = {"arrivals": {"rate": 0.28}, "prompts": {"length": 4096, "sharing": 0.9}}
VIDUR = {"arrivals": {"kind": "poisson", "rate": 1.7}, "topology": {"kind": "chain", "turns": 1},
         "prompts": {"length": 4096, "sharing": 0.0}, "outputs": {"turn": 128}}
CASES = [("study", 600.0, STUDY, "vllm-0.6.3", "l4", {"enable_prefix_caching": True, "gpu_memory_utilization": 0.88}),
         ("study", 600.0, STUDY, "sglang-0.4.1", "l4", {"mem_fraction_static": 0.85}),
         ("vidur", 600.0, VIDUR, "vllm-0.6.3", "a100-80g", {}),
         ("vidur", 6000.0, VIDUR, "vllm-0.6.3", "a100-80g", {})]


def run(repeats: int = 3) -> list[dict]:
    out = []
    for name, duration, sc, engine, hw, over in CASES:
        t = compile_trace(scenario_from_dict({"duration_s": duration, **sc}))
        walls: dict[bool, list[float]] = {False: [], True: []}
        simulate(t, engine, hw, overrides=over)                  # warm up (imports, power tables)
        for _ in range(repeats):
            for ff in (False, True):
                t0 = time.perf_counter()
                rec = simulate(t, engine, hw, overrides=over, fast_forward=ff)
                walls[ff].append(time.perf_counter() - t0)
        step, fast = statistics.median(walls[False]), statistics.median(walls[True])
        out.append({"bench": "fast-forward", "workload": name, "trace_s": duration, "engine": engine, "hardware": hw,
                    "requests": t.n_requests, "step_by_step_s": round(step, 3), "fast_forward_s": round(fast, 3),
                    "speedup": round(step / fast, 2),
                    "x_realtime": round(float(rec.meta["run_window"]["end_s"]) / fast, 1)})
    return out


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row), flush=True)
