"""Are an engine's forwards what the cost model prices? Each forward an SGLang scheduler logged (its step
log: ``SglangCpu(step_log=PREFIX)``, live/sglang_cpu/steplog) is priced by the profile for exactly the
batch it ran — each extend request's new and cached tokens, each decode's sequence length — and the
measured/priced ratios are summarised by forward mode and batch size. A ratio that grows with the batch
says the profile's fixed costs sit in the wrong place (per step instead of per request).

    python -m calibrate.engine_steps PREFIX --hardware PROFILE [--model tiny-llama] [--attention-backend torch_native]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.tables import print_table
from live.sglang_steplog import read_events
from simulator.cost_model import BatchShape, CostModel, extends_whole_sequence
from simulator.profiles import load_hardware, load_model

SIZES = (0, 1, 2, 4, 8, 16, 1 << 20)


def read_forwards(prefix: str | Path) -> list[dict[str, Any]]:
    """Every ``run`` event (a forward with requests) of the step log, in time order."""
    return [e for e in read_events(prefix) if e.get("ev") == "run" and e.get("reqs")]


def sglang_cost(hardware: str | Path, model: str, backend: str | None) -> CostModel:
    """The cost model an SGLang step log is priced with: one replica, no graph limit, the backend's extend
    attention."""
    return CostModel(load_hardware(str(hardware)), load_model(model), "sglang", 1, 1 << 20,
                     extends_whole_sequence(backend))


def shape(ev: dict[str, Any]) -> BatchShape:
    b = BatchShape()
    for r in ev["reqs"]:
        if ev["mode"] in ("EXTEND", "MIXED") and len(r) == 3:
            b.add_prefill(int(r[1]), int(r[2]), True)
        else:
            b.add_decode(int(r[1]))
    return b


def priced(runs: list[dict[str, Any]], cost: CostModel) -> pd.DataFrame:
    rows = [{"mode": ev["mode"], "requests": len(ev["reqs"]), "measured_s": ev["t1"] - ev["t0"],
             "priced_s": cost.step_time(shape(ev))} for ev in runs]
    df = pd.DataFrame(rows)
    df["ratio"] = df["measured_s"] / df["priced_s"]
    return df


MIN_EXTENDS = 10      # fewer logged extends than this in a run: no prefill scale measured


def prefill_scale(runs: list[dict[str, Any]], cost: CostModel) -> tuple[float, int] | None:
    """How much slower (> 1) or faster the instance's forwards with prefill ran than priced, over a run: Σ
    measured / Σ priced (the busy time queueing sees), and how many forwards; None below MIN_EXTENDS."""
    ext = [e for e in runs if e["mode"] in ("EXTEND", "MIXED") and e["reqs"]]
    if len(ext) < MIN_EXTENDS:
        return None
    df = priced(ext, cost)
    return float(df["measured_s"].sum() / df["priced_s"].sum()), len(ext)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Medians per forward mode and batch-size bin (requests in the forward)."""
    binned = pd.cut(df["requests"], list(SIZES))
    g = df.groupby(["mode", binned], observed=True)
    out = g.agg(forwards=("ratio", "size"), measured_ms=("measured_s", "median"), priced_ms=("priced_s", "median"),
                ratio=("ratio", "median")).reset_index()
    out["requests"] = out["requests"].astype(str)
    out[["measured_ms", "priced_ms"]] *= 1000
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", help="the step log's file prefix (files PREFIX.<pid>)")
    ap.add_argument("--hardware", required=True)
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--attention-backend", default="torch_native", help="the engine's resolved backend")
    a = ap.parse_args(argv)
    return print_table(lambda: summary(priced(read_forwards(a.prefix),
                                             sglang_cost(a.hardware, a.model, a.attention_backend))).round(3))


if __name__ == "__main__":
    raise SystemExit(main())
