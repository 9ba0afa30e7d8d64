"""Peer benchmark (``make bench-peers``): Vidur and servetwin on Vidur's own workload, alternating — one A100-80GB
replica, Llama-3-8B, fixed 3,968-token prompts and 128-token outputs (Vidur's Llama-3-8B context is 4,096), Poisson
1.7 requests/s over 600 s and 6,000 s, a vLLM-style scheduler (servetwin: ``vllm-0.6.3``, unshared prompts).
Requests per wall second each way, medians of three alternating runs, and their ratio.

Vidur is installed from the package registry (``VIDUR_SPEC``, default ``vidur==0.0.26``: any pip requirement, a
wheel or a source checkout) into its own virtual environment (``VIDUR_VENV``, default ``.vidur-venv``). Its
profiling data are Hugging Face datasets it downloads at start, which cannot be fetched here: they are written from
servetwin's own A100 cost model into its cache instead (``tests/perf/vidur_profiles.py``), so both simulate
comparable work and only their speed is compared. Its first run trains its random-forest predictors and caches
them (minutes; not timed). Each Vidur run's wall time is its whole process (imports, predictors from its cache,
simulation, metrics written); servetwin's likewise runs ``servetwin simulate`` as a process on a compiled trace.
Both start as a user's Python does, from cached bytecode: Vidur's wheel is compiled when pip installs it, and
servetwin's sources (an editable install) are compiled by an untimed first run, with ``PYTHONDONTWRITEBYTECODE``
cleared for its processes.
Where Vidur cannot be installed the benchmark says why and prints servetwin's figures alone."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QPS, PROMPT, OUTPUT = 1.7, 3968, 128
VENV = Path(os.environ.get("VIDUR_VENV", ROOT / ".vidur-venv"))
CACHE = VENV / "servetwin-cache"
PRED = "random_forrest_execution_time_predictor_config"


def vidur_ready() -> tuple[Path | None, str]:
    """(interpreter, why not)."""
    py = VENV / "bin" / "python"
    have = py.exists() and subprocess.run([str(py), "-c", "import vidur.main"], capture_output=True).returncode == 0
    if not have:
        spec = os.environ.get("VIDUR_SPEC", "vidur==0.0.26")
        made = py.exists() or not subprocess.run([sys.executable, "-m", "venv", str(VENV)],
                                                 capture_output=True).returncode
        if not made or subprocess.run([str(py), "-m", "pip", "install", "-q", spec], capture_output=True).returncode:
            return None, f"could not install {spec} into {VENV}"
    sys.path.insert(0, str(ROOT / "tests" / "perf"))
    from vidur_profiles import write
    write(CACHE)
    return py, ""


def vidur_once(py: Path, duration: float, out: Path) -> tuple[float, int]:
    """Wall seconds of one Vidur process and the requests it simulated."""
    from vidur_profiles import COMPUTE, NETWORK
    args = [str(py), "-m", "vidur.main", "--replica_config_device", "a100", "--replica_config_network_device",
            "a100_pairwise_nvlink", "--replica_config_model_name", "meta-llama/Llama-3-8B",
            "--cluster_config_num_replicas", "1", "--replica_config_tensor_parallel_size", "1",
            "--replica_config_num_pipeline_stages", "1", "--replica_scheduler_config_type", "vllm",
            "--request_generator_config_type", "synthetic", "--synthetic_request_generator_config_duration",
            str(duration), "--length_generator_config_type", "fixed",
            "--fixed_request_length_generator_config_prefill_tokens", str(PROMPT),
            "--fixed_request_length_generator_config_decode_tokens", str(OUTPUT), "--interval_generator_config_type",
            "poisson", "--poisson_request_interval_generator_config_qps", str(QPS),
            "--execution_time_predictor_config_type", "random_forrest", f"--{PRED}_model_profiling_dataset", COMPUTE,
            f"--{PRED}_network_profiling_dataset", NETWORK, f"--{PRED}_cache_dir", str(CACHE),
            f"--{PRED}_prediction_max_tokens_per_request", "8192", "--metrics_config_output_dir", str(out),
            "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace"]
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True,
                   env={**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    metrics = next(out.rglob("request_metrics.csv"))
    return wall, sum(1 for _ in metrics.open()) - 1


# servetwin's processes write and read bytecode as Python does by default
BYTECODE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def servetwin_once(trace: Path, out: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "servetwin.cli", "simulate", "--trace", str(trace), "--engine",
                    "vllm-0.6.3", "--hardware", "a100-80g", "--out", str(out)], check=True, capture_output=True,
                   cwd=ROOT, env=BYTECODE_ENV)
    return time.perf_counter() - t0


def run(repeats: int = 3) -> list[dict]:
    py, why = vidur_ready()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        if py is not None:
            vidur_once(py, 600.0, Path(d) / "warm-up")        # trains and caches its predictors: not timed
        for duration in (600.0, 6000.0):
            scen = Path(d) / f"vidur-{duration:g}.yaml"
            scen.write_text(json.dumps({"name": "vidur", "duration_s": duration, "arrivals": {"kind": "poisson",
                            "rate": QPS}, "topology": {"kind": "chain", "turns": 1}, "prompts": {"length": PROMPT,
                            "sharing": 0.0}, "outputs": {"turn": OUTPUT}}))
            trace = Path(d) / f"t{duration:g}"
            subprocess.run([sys.executable, "-m", "servetwin.cli", "trace", "compile", "--scenario", str(scen),
                            "--seed", "1", "--out", str(trace)], check=True, capture_output=True, cwd=ROOT)
            n = json.loads((trace / "manifest.json").read_text())["counts"]["requests"]
            servetwin_once(trace, Path(d) / f"warm-up-{duration:g}")     # compiles servetwin's bytecode: not timed
            ours, theirs = [], []
            for k in range(repeats):
                if py is not None:
                    wall, m = vidur_once(py, duration, Path(d) / f"vidur-{duration:g}-{k}")
                    theirs.append(m / wall)
                ours.append(n / servetwin_once(trace, Path(d) / f"run-{duration:g}-{k}"))
            row = {"bench": "peers", "workload": "vidur", "trace_s": duration, "requests": n,
                   "servetwin_requests_per_wall_s": round(statistics.median(ours), 1)}
            if theirs:
                row |= {"vidur_requests_per_wall_s": round(statistics.median(theirs), 1),
                        "ratio": round(statistics.median(ours) / statistics.median(theirs), 2)}
            else:
                row["vidur"] = f"not run: {why}"
            rows.append(row)
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r), flush=True)
