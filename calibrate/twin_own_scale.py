"""Two more ways of scaling the twin study's decode steps, beside the calibration trace's: every live run
against a twin scaled by that run's *own* decode speed (a diagnostic), and by the speed its instance
showed in the run it served just before (a tracking twin, held out in time).

The study's twins scale an instance's decode steps by what its calibration trace measured (seed 0), so
each study seed is held out. An instance's decode speed moves from run to run (docs/twin-study.md), and
part of every per-engine miss is that drift. Simulating each run with the decode scale measured on the
run itself (``calibrate.decode_load``: live / twin mean decode gap by streaming count) removes it; what
the targets still miss then is the rest of the model — prefill, scheduling, the host work that competes
with the forward. It is not a prediction (the run's own gaps enter its twin) and never enters a profile:
the report shows it as a column beside the held-out counts, with the spread of the runs' scales.

An instance's speed moves slowly: over four studies (20 instances, 180 runs) the run served just before
predicts a run's decode scale with a mean |log ratio| of 0.073, the calibration trace served first with
0.114 (docs/twin-study.md). The tracking twin (``tracking``) uses that: each run's twin is scaled by
what the instance measured in the run before it (the calibration trace for the first), so nothing of the
run itself enters its twin — it predicts the next run from the instance's recent past, as a twin
following a live engine would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.records import RunRecord, find_runs, read_run, write_run
from calibrate.compare import side_by_side, twin, twin_dir
from calibrate.decode_load import DecodeScale, measure, overhead_family, write_scaled
from calibrate.twin_steplog import PrefillScale, run_prefill_scale, with_prefill_scale
from scenarios.errors import ServetwinError

MODEL = "tiny-llama"


@dataclass
class RunScale:
    path: Path                         # the live run's folder: OUT/live/<cell>/<config>/seed-N
    live: RunRecord
    fitted: Path                       # its engine family's probe-fitted profile (unscaled)
    scale: DecodeScale | None          # None: too few decode gaps in the run to measure one
    source: Path | None = None         # the run the scale was measured on (None: this run itself)
    prefill: PrefillScale | None = None        # its prefill scale (calibrate.twin_steplog)
    prefill_source: Path | None = None         # the run it was measured on (None: this run itself)


def measure_runs(out: Path, label: str, fitted: Path) -> list[RunScale]:
    """Each of the configuration's study runs with its own decode scale against the unscaled fit (and, for
    its own prefill scale: an SGLang instance's from its step log, vLLM's from its lone requests)."""
    got = []
    for path in find_runs([out / "live"]):
        if path.parent.name != label:
            continue
        live = read_run(path)
        prefill = run_prefill_scale(out, label, Path(path), fitted)
        try:
            got.append(RunScale(Path(path), live, fitted, measure(live, str(fitted), MODEL), prefill=prefill))
        except ServetwinError:
            got.append(RunScale(Path(path), live, fitted, None, prefill=prefill))
    return got


def spread(runs: list[RunScale]) -> str:
    """min–max (median, runs) of the runs' own scales, as the report's diagnostic column."""
    got = [r.scale.scale for r in runs if r.scale is not None]
    if not got:
        return "—"
    return f"{min(got):.2f}–{max(got):.2f} ({float(pd.Series(got).median()):.2f}, {len(got)} runs)"


def started(r: RunScale) -> float:
    """When the run began (Unix seconds), as the live run recorded it."""
    when = r.live.meta.get("run_window", {}).get("start_unix")
    if when is None:
        raise ServetwinError(f"{r.path}/run.json: run_window.start_unix missing; the tracking twin orders an "
                             "instance's runs by when they started (recorded by every live run)")
    return float(when)


def tracking(calibration: RunScale, runs: list[RunScale]) -> list[RunScale]:
    """Each of one instance's runs, in the order it served them, carrying the scale of the run before it
    (the calibration trace before the first); a run without a measurable scale passes on the last one
    measured."""
    got, last, last_prefill = [], calibration, calibration
    for r in sorted(runs, key=started):
        got.append(RunScale(r.path, r.live, r.fitted, last.scale, last.path, last_prefill.prefill, last_prefill.path))
        if r.scale is not None:
            last = r
        if r.prefill is not None:
            last_prefill = r
    return got


def scaled_sides(out: Path, runs: list[RunScale], kind: str = "own-scale") -> pd.DataFrame:
    """Side-by-side rows of every run against its twin scaled by the run's scale (written under
    OUT/sim-<kind>; the profiles under OUT/profiles/<kind>). A run without a scale keeps the unscaled fit."""
    pairs = []
    for r in runs:
        live = r.live
        cond, seed = r.path.parent.parent.name, r.path.name
        profile = r.fitted
        dest = out / "profiles" / kind / cond / live.meta["engine"] / f"{seed}.yaml"
        if r.scale is not None:
            source = str((r.source or r.path).relative_to(out))
            profile = write_scaled(r.fitted, dest, overhead_family(live), r.scale, source)
        if r.prefill is not None:
            profile = with_prefill_scale(profile, r.prefill, str((r.prefill_source or r.path).relative_to(out)), dest)
        sim = twin(live, str(profile), MODEL)
        write_run(sim, twin_dir(out / f"sim-{kind}" / cond, live))
        pairs.append((live, sim))
    return side_by_side(pairs) if pairs else pd.DataFrame()
