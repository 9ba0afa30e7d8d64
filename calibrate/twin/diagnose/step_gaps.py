"""Are an engine's steps under load as fast as its fitted profile says? Each gap between two streamed
tokens of a request spans at least one engine step; binned by how many requests were streaming at that
moment (a proxy for the decode batch), the gaps' quartiles are set against the profile's pure-decode
step time at that batch size. Gaps that include prefill steps sit above the prediction; if even the
lower quartile does, the engine's decode steps themselves are slower than the profile.

    servetwin twin-study diagnose step-gaps RUN [RUN ...] --hardware PROFILE --engine sglang [--context 2100]

Whole-sequence extend attention is taken from the runs' resolved ``attention_backend``
(``--whole-sequence-extend`` forces it for runs that did not record one).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from analysis.records import find_runs, read_run
from analysis.tables import to_markdown
from calibrate.streams import token_gaps
from simulator.cost_model import BatchShape, CostModel, extends_whole_sequence
from simulator.profiles import load_hardware, load_model

BINS = (0, 2, 4, 8, 12, 16, 24, 64, 1 << 20)
def against_profile(gaps: pd.DataFrame, cost: CostModel, context: int) -> pd.DataFrame:
    """Gap quartiles per concurrency bin, with the profile's decode step at the bin's middle."""
    binned = pd.cut(gaps["streaming"], list(BINS))
    rows = []
    for iv, g in gaps.groupby(binned, observed=True)["gap_s"]:
        n = max(1, int(min(iv.right, 64) + iv.left) // 2)
        b = BatchShape()
        for _ in range(n):
            b.add_decode(context)
        pred = cost.step_time(b)
        q1, med = float(g.quantile(0.25)), float(g.median())
        rows.append({"streaming": str(iv), "gaps": len(g), "q1_s": q1, "median_s": med, "profile_step_s": pred,
                     "q1_over_profile": q1 / pred, "median_over_profile": med / pred})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose step-gaps",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--hardware", required=True)
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--engine", default="sglang", help="engine family: vllm-v0, vllm-v1, sglang")
    ap.add_argument("--context", type=int, default=2100, help="typical decode context of the runs")
    ap.add_argument("--whole-sequence-extend", action="store_true")
    a = ap.parse_args(argv)
    recs = [read_run(p) for p in find_runs([Path(r) for r in a.runs])]
    full = a.whole_sequence_extend or any(
        extends_whole_sequence(r.meta.get("engine_config", {}).get("attention_backend")) for r in recs)
    cost = CostModel(load_hardware(a.hardware), load_model(a.model), a.engine, 1, 1 << 20, full)
    gaps = pd.concat([token_gaps(r) for r in recs], ignore_index=True)
    print(to_markdown(against_profile(gaps, cost, a.context)))
    return 0
