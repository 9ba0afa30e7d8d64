"""Which of the twin's misses are its own? Several studies of the same pinned cells (the same traces,
each served on fresh engine instances and calibrated on its own) give each fidelity check several
held-out errors. Their mean is the twin's systematic error in that check — what the model gets wrong
however the instances run — and its 95 % t interval over the studies says whether that bias is told
apart from zero; their spread between studies is what one study's error carries on top of it (the
instances' run-to-run drift, the live runs' own noise).

A check whose bias interval excludes zero is a systematic miss of the model (``systematic``); whether
the bias alone, without the noise, would meet the target is ``bias_met``. A check met in few studies
whose bias is near zero misses by noise: no deterministic twin would meet it more often.

Errors are averaged in the log for the ratio targets (engine gaps, per-engine TTFT and E2E p50: ln of
simulated / measured), as differences for φ. Reads each study's ``targets.csv`` (the held-out checks of
its report, written by ``servetwin twin-study``; rebuild an older study's with ``--report-only``).
Studies of other pinned cells, or whose live runs measured on another CPU, are refused: they are not
repeats of one another.

    servetwin twin-study diagnose bias OUT OUT [OUT ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.tables import to_markdown
from calibrate.twin.tables import cpu_name
from calibrate.twin.targets import ENGINE_TOLERANCE, GAP_TOLERANCE, PHI_TOLERANCE, TARGETS_FILE
from foundation.errors import ServetwinError

KEY = ["cell", "target", "what"]


def tolerance(target: str) -> float:
    """The target's tolerance: ±0.15 on φ, 20 % on an engine gap, 15 % per engine."""
    if target.startswith("phi"):
        return PHI_TOLERANCE
    return GAP_TOLERANCE if target.startswith("gap") else ENGINE_TOLERANCE


def read_checks(out: Path) -> pd.DataFrame:
    """One study's held-out checks with the error each target is judged on (log ratio, or φ difference)."""
    path = out / TARGETS_FILE
    if not path.is_file():
        raise ServetwinError(f"{path}: not found; a study's checks are written with its report — rebuild it "
                             f"with `servetwin twin-study --out {out} --report-only`")
    df = pd.read_csv(path)
    missing = {*KEY, "measured", "simulated", "met"} - set(df.columns)
    if missing:
        raise ServetwinError(f"{path}: columns {sorted(missing)} missing; expected a twin study's targets table")
    phi = df["target"].str.startswith("phi")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(df["simulated"].astype(float) / df["measured"].astype(float))
    df["bias_unit"] = np.where(phi, df["simulated"] - df["measured"], ratio)
    df["study"] = out.name
    return df


def study_cpus(out: Path) -> set[str]:
    """The CPUs the study's live runs recorded (runs that recorded none left out)."""
    names = {cpu_name(json.loads(p.read_text())) for p in sorted((out / "live").glob("*/*/seed-*/run.json"))}
    return names - {"not recorded"}


def same_host(outs: list[Path]) -> None:
    """Refuse studies measured on different CPUs: on another CPU the engines are other engines."""
    seen = {o: study_cpus(o) for o in outs}
    named = [(o, c) for o, c in seen.items() if c]
    for o, cpus in named[1:]:
        if cpus != named[0][1]:
            raise ServetwinError(f"{o}: its live runs measured on {', '.join(sorted(cpus))}, {named[0][0]}'s on "
                                 f"{', '.join(sorted(named[0][1]))}; studies on different CPUs are not repeats")


def same_cells(outs: list[Path]) -> None:
    """Refuse studies whose pinned cells differ: their checks are not repeats of one another."""
    def cells(o: Path) -> object:
        path = o / "conditions.json"
        if not path.is_file():
            raise ServetwinError(f"{path}: not found; every study needs its pinned cells (conditions.json)")
        return json.loads(path.read_text())["conditions"]
    first = cells(outs[0])
    for o in outs[1:]:
        if cells(o) != first:
            raise ServetwinError(f"{o}/conditions.json: its cells differ from {outs[0]}'s; only studies of the "
                                 "same pinned cells (the same traces) are repeats of one another")


def bias_table(checks: pd.DataFrame) -> pd.DataFrame:
    """Per check over the studies: how many studies met it, the mean error (the bias: a relative error for
    ratio targets, a difference for φ) with its 95 % t interval, the spread between studies, whether the
    interval excludes zero and whether the bias alone is within the target's tolerance."""
    rows = []
    for (cell, target, what), g in checks.groupby(KEY, sort=False):
        x = g["bias_unit"].to_numpy(float)
        x = x[np.isfinite(x)]
        n = x.size
        mean = float(x.mean()) if n else math.nan
        sd = float(x.std(ddof=1)) if n > 1 else math.nan
        half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) if n > 1 else math.nan
        phi = target.startswith("phi")
        show = (lambda v: v) if phi else math.expm1
        rows.append({"cell": cell, "target": target, "what": what, "studies": n,
                     "met_in": int(g["met"].astype(bool).sum()), "bias": show(mean),
                     "bias_lo": show(mean - half), "bias_hi": show(mean + half), "between_studies_sd": sd,
                     "systematic": bool(n > 1 and (mean - half > 0 or mean + half < 0)),
                     "bias_met": bool(abs(show(mean)) <= tolerance(target)) if n else False})
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per target: checks, mean studies meeting each, systematic biases, those beyond tolerance."""
    g = table.groupby("target", sort=False)
    return pd.DataFrame({"checks": g.size(), "mean_met_in": g["met_in"].mean().round(2),
                         "systematic": g["systematic"].sum(),
                         "systematic_beyond_tolerance": g.apply(lambda t: int((t["systematic"] & ~t["bias_met"]).sum()),
                                                                include_groups=False),
                         "bias_met": g["bias_met"].sum()}).reset_index()


def study_bias(outs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    if len(outs) < 2:
        raise ServetwinError("twin bias: give two or more studies of the same pinned cells")
    same_cells(outs)
    same_host(outs)
    checks = pd.concat([read_checks(o) for o in outs], ignore_index=True)
    table = bias_table(checks)
    return table, summary(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose bias",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("studies", nargs="+", help="twin study folders (OUT of servetwin twin-study)")
    a = ap.parse_args(argv)
    try:
        table, by = study_bias([Path(s) for s in a.studies])
    except ServetwinError as err:
        print(f"twin bias: error: {err}", file=sys.stderr)
        return err.exit_code
    print(f"## The twin's bias over {len(a.studies)} studies (per target)\n")
    print(to_markdown(by))
    print("\n## Per check (bias: mean relative error of simulated over measured; φ: mean difference)\n")
    print(to_markdown(table))
    return 0
