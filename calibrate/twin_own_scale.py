"""A diagnostic of the twin study: every live run against a twin scaled by that run's *own* decode speed.

The study's twins scale an instance's decode steps by what its calibration trace measured (seed 0), so
each study seed is held out. An instance's decode speed moves from run to run (docs/twin-study.md), and
part of every per-engine miss is that drift. Simulating each run with the decode scale measured on the
run itself (``calibrate.decode_load``: live / twin median decode gap by streaming count) removes it; what
the targets still miss then is the rest of the model — prefill, scheduling, the host work that competes
with the forward. It is not a prediction (the run's own gaps enter its twin) and never enters a profile:
the report shows it as a column beside the held-out counts, with the spread of the runs' scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.records import RunRecord, find_runs, read_run, write_run
from calibrate.compare import side_by_side, twin, twin_dir
from calibrate.decode_load import DecodeScale, measure, overhead_family, write_scaled
from scenarios.errors import ServetwinError

MODEL = "tiny-llama"


@dataclass
class RunScale:
    path: Path                         # the live run's folder: OUT/live/<cell>/<config>/seed-N
    live: RunRecord
    fitted: Path                       # its engine family's probe-fitted profile (unscaled)
    scale: DecodeScale | None          # None: too few decode gaps in the run to measure one


def measure_runs(out: Path, label: str, fitted: Path) -> list[RunScale]:
    """Each of the configuration's study runs with its own decode scale against the unscaled fit."""
    got = []
    for path in find_runs([out / "live"]):
        if path.parent.name != label:
            continue
        live = read_run(path)
        try:
            got.append(RunScale(Path(path), live, fitted, measure(live, str(fitted), MODEL)))
        except ServetwinError:
            got.append(RunScale(Path(path), live, fitted, None))
    return got


def spread(runs: list[RunScale]) -> str:
    """min–max (median, runs) of the runs' own scales, as the report's diagnostic column."""
    got = [r.scale.scale for r in runs if r.scale is not None]
    if not got:
        return "—"
    return f"{min(got):.2f}–{max(got):.2f} ({float(pd.Series(got).median()):.2f}, {len(got)} runs)"


def own_scale_sides(out: Path, runs: list[RunScale]) -> pd.DataFrame:
    """Side-by-side rows of every run against its own-scale twin (written under OUT/sim-own-scale; the
    profiles under OUT/profiles/own-scale). A run without a measurable scale keeps the unscaled fit."""
    pairs = []
    for r in runs:
        live = r.live
        cond, seed = r.path.parent.parent.name, r.path.name
        profile = str(r.fitted)
        if r.scale is not None:
            dest = out / "profiles" / "own-scale" / cond / live.meta["engine"] / f"{seed}.yaml"
            profile = str(write_scaled(r.fitted, dest, overhead_family(live), r.scale, str(r.path.relative_to(out))))
        sim = twin(live, profile, MODEL)
        write_run(sim, twin_dir(out / "sim-own-scale" / cond, live))
        pairs.append((live, sim))
    return side_by_side(pairs) if pairs else pd.DataFrame()
