"""Four more ways of scaling the twin study's decode and prefill steps, beside the calibration trace's:
every live run against a twin scaled by that run's *own* speeds (a diagnostic), by the speeds its instance
showed in the run it served just before (a tracking twin, held out in time), and by the speeds its
instance showed over its calibration trace and its runs of the *other* seeds (a cross-validated twin,
held out by seed).

The study's twins scale an instance's decode steps by what its calibration trace measured (seed 0), so
each study seed is held out. An instance's decode speed moves from run to run (docs/studies/twin-1-design.md), and
part of every per-engine miss is that drift. Simulating each run with the decode scale measured on the
run itself (``calibrate.decode_load``: live / twin mean decode gap by streaming count) removes it; what
the targets still miss then is the rest of the model — prefill, scheduling, the host work that competes
with the forward. It is not a prediction (the run's own gaps enter its twin) and never enters a profile:
the report shows it as a column beside the held-out counts, with the spread of the runs' scales.

An instance's speed moves slowly: over four studies (20 instances, 180 runs) the run served just before
predicts a run's decode scale with a mean |log ratio| of 0.073, the calibration trace served first with
0.114 (docs/studies/twin-1-design.md). The tracking twin (``tracking``) uses that: each run's twin is scaled by
what the instance measured in the run before it (the calibration trace for the first), so nothing of the
run itself enters its twin — it predicts the next run from the instance's recent past, as a twin
following a live engine would.

An instance's speed also moves *within* a study by more than a 30-s trace can pin down: on two AMD EPYC
studies (docs/studies/twin-3-calibration.md) a run's decode scale is uncorrelated with the same trace's on another
instance or in the other study (r = −0.14 over 45 pairs), so what a run measured is mostly the run's
own noise, and one 30-s calibration trace carries as much of it as any run. The cross-validated twin
(``other_seeds``) pools, for each run, what its instance measured on its calibration trace and on every
study run of another seed (weighted by the gaps or forwards each measured over, geometric mean), so the
run's own trace, and every run of its seed, stay out of its twin: the "leave one seed out" of a
cross-validation. It uses runs the instance served after the one it predicts — a twin fitted on the
whole study but the seed under test, not one that could run ahead of the engine.

The engine-pooled twin (``engine_pooled``) scales every run of an engine by the calibration traces of *all*
its instances in the study, pooled: the same seed-0 traces the held-out twin uses, three to five times as
many of them. Where a run's speed is mostly its own noise, a scale over more traces predicts it better than
its own instance's 30 s do (``calibrate.twin.diagnose.scale_drift``: "the family's calibration traces"), at the price of
whatever speed is the instance's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from analysis.records import RunRecord, find_runs, read_run, write_run
from analysis.stats import geomean
from calibrate.compare import side_by_side, twin, twin_dir
from calibrate.decode_load import DecodeScale, measure, overhead_family, write_scaled
from calibrate.twin.live import start_unix
from calibrate.twin.steplog import PrefillScale, run_prefill_scale, with_prefill_scale
from foundation.errors import ServetwinError

MODEL = "tiny-llama"


@dataclass
class RunScale:
    path: Path                         # the live run's folder: OUT/live/<cell>/<config>/seed-N
    live: RunRecord
    fitted: Path                       # its engine family's probe-fitted profile (unscaled)
    scale: DecodeScale | None          # None: too few decode gaps in the run to measure one
    source: Path | str | None = None   # the run the scale was measured on (None: this run itself; a str: runs)
    prefill: PrefillScale | None = None        # its prefill scale (calibrate.twin.steplog)
    prefill_source: Path | str | None = None   # the run it was measured on (as ``source``)


def measure_runs(out: Path, label: str, fitted: Path) -> list[RunScale]:
    """Each of the configuration's study runs with its own scales (``measure_run``)."""
    return [measure_run(out, label, Path(path), fitted) for path in find_runs([out / "live"])
            if Path(path).parent.name == label]


def measure_run(out: Path, label: str, path: Path, fitted: Path) -> RunScale:
    """One run of the configuration's instance with its own decode scale against the unscaled fit (None
    where it had too few decode gaps) and its own prefill scale (an SGLang instance's from its step log,
    vLLM's from its lone requests)."""
    live = read_run(path)
    prefill = run_prefill_scale(out, label, path, fitted)
    try:
        return RunScale(path, live, fitted, measure(live, str(fitted), MODEL), prefill=prefill)
    except ServetwinError:
        return RunScale(path, live, fitted, None, prefill=prefill)


def pooled_calibration(parts: list[RunScale], out: Path) -> RunScale:
    """An instance's calibration traces as one run: their decode and prefill scales pooled (``pooled_decode``,
    ``pooled_prefill``; traces that measured none left out), the first trace's record. One trace is itself."""
    if len(parts) == 1:
        return parts[0]
    root = parts[0].path.parent.parent
    what = f"{len(parts)} calibration traces pooled ({root.relative_to(out)}/*/{parts[0].path.name})"
    return pooled_as(replace(parts[0], path=root), parts, what)


def pooled_as(run: RunScale, parts: list[RunScale], what: str) -> RunScale:
    """``run`` carrying the decode and prefill scales of ``parts`` pooled (``pooled_decode``, ``pooled_prefill``;
    parts that measured none left out; None where none did), both measured on ``what``."""
    dec = [p.scale for p in parts if p.scale is not None]
    pre = [p.prefill for p in parts if p.prefill is not None]
    return replace(run, scale=pooled_decode(dec) if dec else None, source=what,
                   prefill=pooled_prefill(pre) if pre else None, prefill_source=what)


def spread(runs: list[RunScale]) -> str:
    """min–max (median, runs) of the runs' own scales, as the report's diagnostic column."""
    got = [r.scale.scale for r in runs if r.scale is not None]
    if not got:
        return "—"
    return f"{min(got):.2f}–{max(got):.2f} ({float(pd.Series(got).median()):.2f}, {len(got)} runs)"


def started(r: RunScale) -> float:
    """When the run began (Unix seconds), as the live run recorded it (``calibrate.twin.live.start_unix``)."""
    return start_unix(r.live.meta, r.path)


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


def pooled_decode(parts: list[DecodeScale]) -> DecodeScale:
    """Decode scales measured on several runs as one: the geometric mean weighted by each one's gaps."""
    lone = [(p.lone, p.lone_gaps) for p in parts if p.lone is not None]
    return DecodeScale(geomean([p.scale for p in parts], [p.gaps for p in parts]), sum(p.gaps for p in parts),
                       pd.concat([p.by_streams for p in parts], ignore_index=True), parts[0].statistic,
                       geomean(*zip(*lone, strict=True)) if lone else None, sum(n for _, n in lone))


def pooled_prefill(parts: list[PrefillScale]) -> PrefillScale:
    """Prefill scales measured on several runs as one: the geometric mean weighted by each one's count. Its
    basis ends, as each part's does, with "over N" — N the pooled count (the scale-drift diagnosis reads
    it)."""
    total = sum(p.n for p in parts)
    basis = re.sub(r"over \d+$", f"over {total}", parts[0].basis)
    return PrefillScale(geomean([p.scale for p in parts], [p.n for p in parts]), total, parts[0].family,
                        f"{len(parts)} runs pooled: {basis}")


def seed_of(r: RunScale) -> str:
    return r.path.name


def other_seeds(calibration: RunScale, runs: list[RunScale]) -> list[RunScale]:
    """Each of one instance's runs carrying the scales pooled over its calibration trace and its runs of
    every other seed (the runs that measured one; ``pooled_decode``, ``pooled_prefill``)."""
    got = []
    for r in runs:
        pool = [calibration] + [o for o in runs if seed_of(o) != seed_of(r)]
        what = f"calibration traces and the instance's runs of seeds other than {seed_of(r)}"
        got.append(pooled_as(r, pool, what))
    return got


def engine_pooled(calibration: RunScale, traces: list[RunScale], engine: str) -> RunScale:
    """An instance's calibration (``calibration``: its record and base profile) carrying the decode and prefill
    scales of ``traces`` — the calibration traces of every instance of its engine in the study — pooled
    (``pooled_as``). Only seed 0 enters, so every study seed stays held out."""
    what = f"the calibration traces of every {engine} instance of the study ({len(traces)} traces) pooled"
    got = pooled_as(calibration, traces, what)
    if got.scale is None:
        raise ServetwinError(f"{engine}: none of its {len(traces)} calibration traces measured a decode scale")
    return got


def source_text(source: Path | str | None, run: Path, out: Path) -> str:
    """What a twin's scale was measured on, as its profile records it."""
    if isinstance(source, str):
        return source
    return str((source or run).relative_to(out))


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
            profile = write_scaled(r.fitted, dest, overhead_family(live), r.scale, source_text(r.source, r.path, out))
        if r.prefill is not None:
            profile = with_prefill_scale(profile, r.prefill, source_text(r.prefill_source, r.path, out), dest)
        sim = twin(live, str(profile), MODEL)
        write_run(sim, twin_dir(out / f"sim-{kind}" / cond, live))
        pairs.append((live, sim))
    return side_by_side(pairs) if pairs else pd.DataFrame()
