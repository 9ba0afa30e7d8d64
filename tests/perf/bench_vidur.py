"""Peer benchmark (``make bench-peers``): Vidur and servetwin on Vidur's own workload, alternating — one A100-80GB
replica, Llama-3-8B, fixed 4,096-token prompts and 128-token outputs, Poisson 1.7 requests/s over 600 s and
6,000 s, a vLLM-style scheduler (servetwin: ``vllm-0.6.3``, unshared prompts). Requests per wall second each way
and their ratio.

Vidur comes from a source checkout (``VIDUR_SRC``, e.g. a clone of microsoft/vidur) installed into its own virtual
environment (``VIDUR_VENV``, default ``.vidur-venv``; its requirements from the package registry). It needs its A100
profiling data for the model in the checkout (``data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/*.csv``
and ``data/profiling/network/a100_pairwise_nvlink/*.csv``); where the checkout, the environment or the data is
missing the benchmark says which and prints servetwin's figures alone. Each Vidur run's wall time is its whole
process (imports, predictor training from its cache, simulation); servetwin's likewise runs `servetwin simulate`
as a process on a compiled trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
            "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv",
            "data/profiling/network/a100_pairwise_nvlink/all_reduce.csv",
            "data/profiling/network/a100_pairwise_nvlink/send_recv.csv")
QPS, PROMPT, OUTPUT = 1.7, 4096, 128


def vidur_ready() -> tuple[Path | None, Path | None, str]:
    """(checkout, interpreter, why not)."""
    src = os.environ.get("VIDUR_SRC")
    if not src or not Path(src, "vidur", "main.py").is_file():
        return None, None, "set VIDUR_SRC to a checkout of microsoft/vidur (vidur/main.py not found)"
    missing = [p for p in PROFILES if not Path(src, p).is_file()]
    if missing:
        return None, None, f"the checkout lacks Vidur's profiling data: {', '.join(missing)}"
    venv = Path(os.environ.get("VIDUR_VENV", ROOT / ".vidur-venv"))
    py = venv / "bin" / "python"
    if not py.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        got = made.returncode == 0 and subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "-r", str(Path(src, "requirements.txt"))],
            capture_output=True, text=True).returncode == 0
        if not got:
            return None, None, f"could not install Vidur's requirements into {venv}"
    return Path(src), py, ""


def vidur_once(src: Path, py: Path, duration: float, out: Path) -> float:
    args = [str(py), "-m", "vidur.main", "--replica_config_device", "a100", "--replica_config_model_name",
            "meta-llama/Meta-Llama-3-8B", "--cluster_config_num_replicas", "1",
            "--replica_config_tensor_parallel_size", "1", "--request_generator_config_type", "synthetic",
            "--synthetic_request_generator_config_duration", str(duration),
            "--length_generator_config_type", "fixed", "--fixed_request_length_generator_config_prefill_tokens",
            str(PROMPT), "--fixed_request_length_generator_config_decode_tokens", str(OUTPUT),
            "--interval_generator_config_type", "poisson", "--poisson_request_interval_generator_config_qps", str(QPS),
            "--replica_scheduler_config_type", "vllm", "--metrics_config_output_dir", str(out),
            "--metrics_config_cache_dir", str(out / "cache"), "--no-metrics_config_store_plots",
            "--no-metrics_config_enable_chrome_trace"]
    t0 = time.perf_counter()
    subprocess.run(args, cwd=src, check=True, capture_output=True, env={**os.environ, "WANDB_MODE": "disabled"})
    return time.perf_counter() - t0


def servetwin_once(trace: Path, out: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "servetwin.cli", "simulate", "--trace", str(trace), "--engine",
                    "vllm-0.6.3", "--hardware", "a100-80g", "--out", str(out)], check=True, capture_output=True,
                   cwd=ROOT)
    return time.perf_counter() - t0


def run(repeats: int = 2) -> list[dict]:
    src, py, why = vidur_ready()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for duration in (600.0, 6000.0):
            scen = Path(d) / f"vidur-{duration:g}.yaml"
            scen.write_text(json.dumps({"name": "vidur", "duration_s": duration, "arrivals": {"kind": "poisson",
                            "rate": QPS}, "topology": {"kind": "chain", "turns": 1}, "prompts": {"length": PROMPT,
                            "sharing": 0.0}, "outputs": {"turn": OUTPUT}}))
            trace = Path(d) / f"t{duration:g}"
            subprocess.run([sys.executable, "-m", "servetwin.cli", "trace", "compile", "--scenario", str(scen),
                            "--seed", "1", "--out", str(trace)], check=True, capture_output=True, cwd=ROOT)
            n = json.loads((trace / "manifest.json").read_text())["counts"]["requests"]
            ours, theirs = [], []
            for k in range(repeats):
                if src is not None and py is not None:
                    theirs.append(vidur_once(src, py, duration, Path(d) / f"vidur-{duration:g}-{k}"))
                ours.append(servetwin_once(trace, Path(d) / f"run-{duration:g}-{k}"))
            row = {"bench": "peers", "workload": "vidur", "trace_s": duration, "requests": n,
                   "servetwin_wall_s": round(min(ours), 2), "servetwin_requests_per_wall_s": round(n / min(ours), 1)}
            if theirs:
                row |= {"vidur_wall_s": round(min(theirs), 2), "ratio_requests_per_wall_s": round(min(theirs) /
                                                                                                 min(ours), 1)}
            else:
                row["vidur"] = f"not run: {why}"
            rows.append(row)
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r), flush=True)
