"""How closely one engine instance repeats itself: the same seeded trace served several times back to back
on one instance of a twin-study configuration (each run from an emptied prefix cache, as the study's
runs), each run's TTFT p50, E2E p50 and TPOT p50 — and, against a fitted profile, its decode scale — and
their spread. Nothing differs between the runs but the engine and the host, so the spread is the floor
under any twin's per-run error here: a deterministic twin predicts every run alike.

    servetwin twin-study diagnose repeatability --config vllm-c512 --rate 0.66 --sharing 0.9 --seconds 20 \\
        --times 9 \\
        --out out/repeat-vllm [--profile out/twin/profiles/cpu-vllm.yaml]
    servetwin twin-study diagnose repeatability --out out/repeat-vllm --summary-only [--profile PROFILE]

The runs go to ``OUT/run-<i>`` (a run already recorded is kept: the command resumes), the tables to
``OUT/repeatability.md``. ``loo_abs_log`` is the mean over runs of |ln(run / geometric mean of the other
runs)|: how well the rest predict one run, comparable to ``calibrate.twin.diagnose.scale_drift``'s errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import calibrate.twin.live as tl
from analysis.metrics import run_metrics
from analysis.records import RunRecord, read_run
from analysis.tables import to_markdown
from calibrate.decode_load import measure
from foundation.errors import ServetwinError
from live.priority import realtime_client
from scenarios.spec import scenario_from_dict

METRICS = ("ttft_p50", "e2e_p50", "tpot_p50")
MODEL = "tiny-llama"


def run_dirs(out: Path, times: int) -> list[Path]:
    return [out / f"run-{i}" for i in range(times)]


def serve_repeats(out: Path, label: str, rate: float, sharing: float, seconds: float, times: int) -> list[Path]:
    """Serve the cell's seed-0 trace (its first ``seconds``) ``times`` times on one fresh instance of the
    configuration; runs already recorded are kept, and no engine starts when all are."""
    if label not in tl.CONFIGS:
        raise ServetwinError(f"--config {label!r}: not a twin-study configuration; one of {', '.join(tl.CONFIGS)}")
    dirs = run_dirs(out, times)
    todo = [d for d in dirs if not (d / "run.json").is_file()]
    if not todo:
        return dirs
    kind, opts = tl.CONFIGS[label]
    trace = tl.compile_trace(scenario_from_dict(tl.calibration_scenario(rate, sharing, seconds)))
    eng = tl.engine(kind, opts, out / f"{label}.log").start()
    try:
        for dest in todo:
            tl.record_run(eng, label, trace, dest, out)
    finally:
        eng.stop()
    return dirs


def repeat_table(runs: list[RunRecord], profile: str | None = None) -> pd.DataFrame:
    """One row per run: its TTFT, E2E and TPOT p50 (s) and, with a profile, its decode scale against it."""
    if len({r.meta.get("trace_digest") for r in runs}) > 1:
        raise ServetwinError("repeatability: the runs served different traces; it compares repeats of one trace")
    if len({r.meta.get("engine") for r in runs}) > 1:
        raise ServetwinError("repeatability: the runs come from different configurations "
                             f"({', '.join(sorted(str(r.meta.get('engine')) for r in runs))}); give each its own --out")
    rows = []
    for r in runs:
        m = run_metrics(r)
        row = {"run": r.path.name if r.path else r.run_id, **{k: float(m[k]) for k in METRICS}}
        if profile is not None:
            row["decode_scale"] = measure(r, profile, MODEL).scale
        rows.append(row)
    return pd.DataFrame(rows)


def spread(table: pd.DataFrame) -> pd.DataFrame:
    """Per metric: runs, median, coefficient of variation, max / min, and the leave-one-out error (mean
    |ln(run / geometric mean of the others)|)."""
    rows = []
    for col in [c for c in table.columns if c != "run"]:
        x = table[col].to_numpy(float)
        x = x[np.isfinite(x) & (x > 0)]
        if x.size < 2:
            continue
        logs = np.log(x)
        others = (logs.sum() - logs) / (x.size - 1)
        rows.append({"metric": col, "runs": int(x.size), "median": float(np.median(x)),
                     "cv": float(x.std(ddof=1) / x.mean()), "max_over_min": float(x.max() / x.min()),
                     "loo_abs_log": float(np.abs(logs - others).mean())})
    return pd.DataFrame(rows)


def report(out: Path, times: int, profile: str | None) -> str:
    runs = [read_run(d) for d in run_dirs(out, times) if (d / "run.json").is_file()]
    if len(runs) < 2:
        raise ServetwinError(f"{out}: {len(runs)} recorded run(s) of the {times} asked; the spread needs two or more")
    table = repeat_table(runs, profile)
    return "\n".join([f"# The same trace served {len(runs)} times on one instance\n", to_markdown(table), "",
                      "## Spread\n", to_markdown(spread(table)), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose repeatability",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default="vllm-c512", help=f"one of {', '.join(tl.CONFIGS)}")
    ap.add_argument("--rate", type=float, default=0.66, help="DAG arrival rate of the trace")
    ap.add_argument("--sharing", type=float, default=0.9, help="shared-prefix fraction σ of the trace")
    ap.add_argument("--seconds", type=float, default=20.0, help="how much of the trace each run serves")
    ap.add_argument("--times", type=int, default=9, help="how many runs")
    ap.add_argument("--profile", default=None, help="a fitted profile: each run's decode scale against it")
    ap.add_argument("--summary-only", action="store_true", help="tabulate the recorded runs; start no engine")
    a = ap.parse_args(argv)
    if a.times < 2 or a.seconds <= 0:
        ap.error(f"--times {a.times} --seconds {a.seconds:g}: the spread needs 2 or more runs of a positive length")
    out = Path(a.out)
    try:
        if not a.summary_only:
            print(f"client scheduling: {realtime_client()}", file=sys.stderr)
            out.mkdir(parents=True, exist_ok=True)
            serve_repeats(out, a.config, a.rate, a.sharing, a.seconds, a.times)
        text = report(out, a.times, a.profile)
    except ServetwinError as err:
        print(f"repeatability: error: {err}", file=sys.stderr)
        return err.exit_code
    (out / "repeatability.md").write_text(text)
    print(text)
    return 0
