"""Small hand-built traces and engines for hand-checked scheduler scenarios."""

from __future__ import annotations

import numpy as np

from scenarios.trace import SRC_POOL, Trace, npy_bytes, sha256
from simulator.presets import resolve
from simulator.profiles import HardwareProfile, Overheads, load_hardware, load_model
from simulator.request import Request

HW = load_hardware("l4")
MODEL = load_model("llama-3.1-8b")


def config(preset: str, **over):  # type: ignore[no-untyped-def]
    return resolve(preset, HW, MODEL, 16384, over)


def request(i: int, n: int, max_tokens: int = 4, shared: int = 0, dag: int = 0) -> Request:
    """Prompt of n tokens; the first ``shared`` tokens are common to every request built with shared>0."""
    own = np.full(n - shared, 1_000_000 + i, dtype=np.int32) + np.arange(n - shared, dtype=np.int32) * 7
    toks = np.concatenate([np.arange(shared, dtype=np.int32), own])
    return Request(i, dag, "worker", toks.astype(np.int32), max_tokens, 0.0, 0.0, i)


def constant_hardware(step_s: float) -> HardwareProfile:
    """A degenerate GPU: every step takes exactly step_s (infinite FLOP/s and bandwidth)."""
    o = Overheads(step_graph_s=step_s, step_eager_s=step_s, per_seq_s=0.0)
    return HardwareProfile(name="constant", peak_flops=1e30, mem_bandwidth=1e30, memory_cuda_gib=HW.memory_cuda_gib,
                           memory_smi_mib=HW.memory_smi_mib, init_used_gib=HW.init_used_gib, link_bandwidth=1e30,
                           link_latency_s=0.0, eta_compute=1.0, eta_bandwidth=1.0, kappa_kv=1.0,
                           overheads={"vllm-v0": o, "vllm-v1": o, "sglang": o})


def single_request_trace(arrivals: np.ndarray, prompt_len: int, max_tokens: int, seed: int = 0) -> Trace:
    """One request per DAG at the given arrival times, distinct prompts."""
    n = arrivals.size
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 100_000, size=n * prompt_len, dtype=np.int32)
    segs = np.asarray([(SRC_POOL, i * prompt_len, prompt_len) for i in range(n)], dtype=np.int64).reshape(-1, 3)
    arrays = {"dag": np.arange(n, dtype=np.int32), "role": np.full(n, 3, np.int8),
              "arrival_s": arrivals.astype(np.float64), "delay_s": np.zeros(n),
              "pred_offsets": np.zeros(n + 1, np.int64),
              "pred_index": np.zeros(0, np.int32), "max_tokens": np.full(n, max_tokens, np.int32),
              "seg_offsets": np.arange(n + 1, dtype=np.int64), "segments": segs,
              "prefix": np.zeros(0, np.int32), "pool": pool}
    duration = float(arrivals.max()) + 1 if n else 1.0
    manifest = {"format_version": 1, "seed": seed, "scenario": {"name": "hand", "duration_s": duration},
                "offered_load_rps": n / duration, "target_sharing": 0.0, "achieved_sharing": 0.0,
                "tool_delay_max_s": 0.0, "prefix_sha256": "", "counts": {}}
    manifest["digests"] = {k: sha256(npy_bytes(v)) for k, v in arrays.items()}
    return Trace(manifest=manifest, arrays=arrays)


def assert_dependants_sent_when_ready(trace: Trace, requests) -> None:  # type: ignore[no-untyped-def]
    """Every dependant was sent when its last predecessor's last token reached the client, plus its tool
    delay (``requests``: a run's requests table indexed by request_id)."""
    for i in range(trace.n_requests):
        preds = trace.predecessors(i)
        if len(preds):
            ready = requests.loc[preds, "last_token_s"].max() + trace.arrays["delay_s"][i]
            assert abs(requests.loc[i, "send_s"] - ready) < 1e-9, (i, requests.loc[i, "send_s"], ready)


VLLM_T0 = 1.8e9          # the Unix time a simulated "live" vLLM run starts at in these tests


def vllm_line(t: float, i: int, ctx: int, ctx_tokens: int, gen: int, ms: float) -> str:
    """One iteration line as vLLM's stat logger writes it to a step log (``live.vllm_steplog``)."""
    return (f"{VLLM_T0 + t:.6f} 4242 Engine 000: Iteration({i}): {ctx} context requests, {ctx_tokens} context tokens, "
            f"{gen} generation requests, {gen} generation tokens, iteration elapsed time: {ms:.2f} ms, "
            "CPU KV cache usage: 0.4%")


def vllm_step_log(log: list, lag_s: float = 0.0) -> str:
    """A simulator step log written as vLLM logs its iterations, each line ``lag_s`` after its step ended."""
    lines = []
    for k, e in enumerate(ev for ev in log if ev.get("ev") == "run"):
        pre = [r for r in e["reqs"] if len(r) == 3]
        lines.append(vllm_line(e["t1"] + lag_s, k, len(pre), sum(r[1] for r in pre), len(e["reqs"]) - len(pre),
                               (e["t1"] - e["t0"]) * 1000))
    return "\n".join(lines) + "\n"


def mixed_trace(turns: int) -> Trace:
    """300 s at 0.3 DAG/s of fanouts (2 workers) and chains of ``turns`` mixed half and half, 64-token prefix,
    16-token suffixes, 32 tokens of DAG context: prompts from every kind of pool segment."""
    from scenarios import compile_trace, scenario_from_dict
    return compile_trace(scenario_from_dict({
        "duration_s": 300, "arrivals": {"rate": 0.3},
        "topology": {"kind": "mix", "items": [{"weight": 1, "topology": {"kind": "fanout", "workers": 2}},
                                              {"weight": 1, "topology": {"kind": "chain", "turns": turns}}]},
        "prompts": {"prefix_tokens": 64, "suffix_tokens": 16, "dag_context_tokens": 32}}))


def in_pure_process(fn: str) -> None:
    """Run ``module:function`` of the tests in a fresh process on the simulator's sources (``SERVETWIN_PURE=1``): for a
    check that patches a simulator class, which the compiled modules (simulator/native.py) do not allow; the sources
    and the compiled modules give the same results (tests/test_native.py)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    mod, name = fn.split(":")
    done = subprocess.run([sys.executable, "-c", f"import {mod} as m; m.{name}()"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], env={**os.environ, "SERVETWIN_PURE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
