"""The two-engine study on this machine: vLLM (CPU build) and SGLang (CPU path) serving the same tiny
model, driven with the same seeded agent traces under vendor-style defaults and with the chunked-prefill
budget matched (plus SGLang FCFS vs LPM), then the same traces simulated with each engine's fitted
profile; measured and simulated tables side by side.

    servetwin twin-study --out out/twin [--quick]        (or servetwin twin-study …)

Arms (labels): defaults = vllm-nochunk (chunked prefill off, as vLLM 0.6.3's default) vs sglang-lpm (its
resolved 4,096-token chunk, LPM); matched = vllm-c512 vs sglang-lpm-c512 (both 512-token budgets); ablation =
sglang-fcfs-c512. Rates: around the knee of the slower engine, found by capacity search on its fitted
simulated twin, once: the cells are pinned in ``OUT/conditions.json`` so that refitting a profile re-simulates
the same live runs instead of starting a new study (delete the file for a new knee); the knee is searched on
SGLang's twin fitted to its default configuration's probes, as soon as they exist. Without --quick: two rates
and a sharing sweep, 3 seeds each, 40-second runs (43–54 minutes, capacity search included, on a 2-core CPU
without bf16 matrix instructions); with --quick: one rate, 2 seeds. The profiles are fitted on probes, so
every study seed is held out from the fit: each engine is probed in its default configuration (``STUDY_PLAN``)
and with its 512-token budget (the chunking shapes) and fitted on both; each probed instance then serves its
runs (``calibrate.twin.live``: one instance per configuration). Each engine instance serves calibration
traces (seed 0 of each cell, 30 s in all: 10 s each over three cells) before its study seeds; its decode steps
under that load, against the fitted profile, give the instance's ``decode_scale`` (``calibrate.decode_load``;
the traces pooled, each weighted by its decode gaps), and its prefill steps its
``prefill_scale`` (SGLang's from its step log, vLLM's from the requests served alone:
``calibrate.twin.steplog``), written to ``OUT/profiles/<config>.yaml``. The report's targets use those
profiles and repeat the counts with the probe-only ones, with a tracking twin (every run scaled by the speeds
its instance measured in the run it served before), with a cross-validated twin (scaled by the speeds its
instance measured on its calibration traces and its runs of the other seeds) and, as a diagnostic, with every
run's twin scaled by that run's own speeds (``calibrate.twin.own_scale``). ``--repeat-of DIR`` (another
study's OUT with the same pinned cells) holds that study's live runs to the same targets against this one's,
in the simulator's place: how well the engines agree with themselves on this machine.

    servetwin twin-study --out out/twin --repeat-of out/twin-previous
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.metrics import KEEPS_PACE, run_metrics
from analysis.records import RunRecord, find_runs, read_run
from analysis.tables import to_markdown
from calibrate.compare import compare
from calibrate.decode_load import overhead_family, write_scaled
from calibrate.probe_fit import fit_probes
from calibrate.twin.args import CALIBRATIONS, add_arguments, bad_options, calibrated_path
from calibrate.twin.host_speed import report_part as host_speed_part
from calibrate.twin.live import (
    CALIBRATION_S,
    CALIBRATION_SEED,
    CONFIGS,
    DESIGN,
    KNEE_PROBES,
    PROBED,
    RUN_S,
    SHARINGS,
    Cells,
    calibration_dirs,
    cell,
    pending_probe,
    probe_dirs,
    require_recorded,
    run_engines,
    run_interleaved,
    scenario,
    served_at,
)
from calibrate.twin.own_scale import (
    RunScale,
    engine_pooled,
    measure_run,
    measure_runs,
    other_seeds,
    pooled_calibration,
    scaled_sides,
    source_text,
    spread,
    tracking,
)
from calibrate.twin.steplog import (
    PrefillScale,
    fit_base,
    vllm_step_log,
    with_front_end,
    with_own_latencies,
    with_prefill_scale,
)
from calibrate.twin.tables import client_table, fit_table, host_cpus, keeps_pace_table, serving_order
from calibrate.twin.targets import TARGETS_FILE, met_counts, repeat_checks, study_tables, target_checks
from foundation.errors import ServetwinError
from live.priority import realtime_client
from paper_figures.figures import measured_vs_simulated
from scenarios.spec import scenario_from_dict
from simulator.capacity import capacity_search
from simulator.profiles import load_hardware

OWN_SCALE_COLUMN = "met with each run's own scales (diagnostic, not held out)"
POOLED_COLUMN = ("met by an engine-pooled twin (every instance scaled by the calibration traces of all its "
                 "engine's instances, pooled; held out)")
INSTANCE_COLUMN = "met by a per-instance twin (every instance scaled by its own calibration traces; held out)"
# the twin counted beside the held-out one, by the held-out twin's calibration: (its sim-<kind> folder, column)
BESIDE = {"instance": ("engine-pooled", POOLED_COLUMN), "engine": ("instance", INSTANCE_COLUMN)}
TRACKING_COLUMN = "met by a tracking twin (the scales of the run its instance served before; held out)"
CROSS_COLUMN = ("met by a cross-validated twin (the scales of the instance's calibration traces and runs of the "
                "other seeds; held out by seed)")


def family_profile(out: Path, label: str) -> Path:
    return out / "profiles" / f"cpu-{CONFIGS[label][0]}.yaml"


Scaled = dict[str, list[RunScale]]


@dataclass
class Calibrated:
    profiles: dict[str, Path]          # each configuration's per-instance profile (its own calibration traces)
    scales: pd.DataFrame               # the calibration table of the report
    runs: Scaled                       # every study run with the scales of the twins beside it
    pooled: dict[str, Path]            # each calibrated configuration's engine-pooled profile (profiles/engine-pooled)


def calibrate_instances(out: Path, latencies: bool = True) -> Calibrated:
    """Each configuration's profile: its family's probe fit with the decode and prefill scales its
    instance's calibration traces measured, pooled (the probe fit alone where no calibration run exists);
    the table of those scales; and every study run with its own scale (``own-scale``, a diagnostic), with
    the scale of the run its instance served before it (``tracking``) and with the scale of its instance's
    calibration traces and runs of the other seeds (``other-seeds``; ``calibrate.twin.own_scale``)."""
    profiles, rows = {}, []
    runs: Scaled = {"own-scale": [], "tracking": [], "other-seeds": []}
    calibrated: dict[str, RunScale] = {}
    traces_of: dict[str, list[RunScale]] = {}
    for label in CONFIGS:
        fitted = family_profile(out, label)
        if latencies:
            fitted = with_front_end(out, label, fitted)
        profiles[label] = fitted
        got = calibration(out, label, fitted)
        if got is None:
            continue
        cal_run, traces = got
        calibrated[label] = cal_run
        traces_of.setdefault(CONFIGS[label][0], []).extend(traces)
        profiles[label] = scaled_profile(out, label, cal_run, calibrated_path(out, label, "instance"), latencies)
        mine = measure_runs(out, label, fitted)
        runs["own-scale"] += mine
        runs["tracking"] += tracking(cal_run, mine)
        runs["other-seeds"] += other_seeds(cal_run, mine)
        found = cal_run.scale
        assert found is not None          # calibration() raises where no trace measured one
        rows.append({"config": label, "decode_scale": found.scale, "decode_gaps": found.gaps,
                     "by trace (served order)": " / ".join(
                         "—" if t.scale is None else f"{t.scale.scale:.2f} ({t.scale.gaps})" for t in traces),
                     "lone_request (gaps)": "—" if found.lone is None else f"{found.lone:.3f} ({found.lone_gaps})",
                     "streaming_counts": found.by_streams["streaming"].nunique(),
                     "ratio_range": f"{found.by_streams['ratio'].min():.2f}–{found.by_streams['ratio'].max():.2f}",
                     "study_runs (not used)": spread(mine),
                     "prefill_scale (SGLang: step log; vLLM: lone requests)": prefill_spread(cal_run.prefill, mine),
                     "front-end loop, ms per step / between streams (vLLM: step log)":
                         loop_text(profiles[label], cal_run)})
    engine_wide = {label: engine_pooled(cal_run, traces_of[CONFIGS[label][0]], CONFIGS[label][0])
                   for label, cal_run in calibrated.items()}
    pooled = {label: scaled_profile(out, label, run, calibrated_path(out, label, "engine"), latencies)
              for label, run in engine_wide.items()}
    table = pd.DataFrame(rows)
    if not table.empty:
        table["engine-pooled decode (lone) / prefill scale"] = [pooled_text(engine_wide[c]) for c in table["config"]]
    return Calibrated(profiles, table, runs, pooled)


def pooled_text(run: RunScale) -> str:
    """The engine-pooled decode scale (its lone request's in brackets) and prefill scale, as the table shows them."""
    assert run.scale is not None          # engine_pooled() raises where no trace measured one
    lone = "" if run.scale.lone is None else f" ({run.scale.lone:.3f})"
    return f"{run.scale.scale:.3f}{lone} / {'—' if run.prefill is None else f'{run.prefill.scale:.3f}'}"


def scaled_profile(out: Path, label: str, run: RunScale, dest: Path, latencies: bool) -> Path:
    """The instance's profile: its base (``run.fitted``) with the decode and prefill scales ``run`` carries
    and, with ``latencies``, its own measured latencies (``with_own_latencies``), at ``dest``."""
    assert run.scale is not None          # calibration() and engine_pooled() raise where no trace measured one
    source = source_text(run.source, run.path, out)
    scaled = write_scaled(run.fitted, dest, overhead_family(run.live), run.scale, source)
    scaled = with_prefill_scale(scaled, run.prefill, source)
    return with_own_latencies(out, label, scaled) if latencies else scaled


def loop_text(profile: Path, cal_run: RunScale) -> str:
    """A vLLM instance's front-end loop as its profile has it: ms per step / ms between streams ('—': none)."""
    ovh = load_hardware(str(profile)).overhead(overhead_family(cal_run.live))
    if max(ovh.front_end_step_s, ovh.stream_chunk_s) <= 0:
        return "—"
    return f"{ovh.front_end_step_s * 1000:.2f} / {ovh.stream_chunk_s * 1000:.2f}"


def calibration(out: Path, label: str, fitted: Path) -> tuple[RunScale, list[RunScale]] | None:
    """The instance's calibration traces as one run (``calibrate.twin.own_scale.pooled_calibration``) and
    each of them: None where it served none; an error where none of them measured a decode scale."""
    dirs = calibration_dirs(out, label)
    if not dirs:
        return None
    parts = [measure_run(out, label, d, fitted) for d in dirs]
    if all(p.scale is None for p in parts):
        raise ServetwinError(f"{out / 'calibration' / label}: none of its {len(parts)} calibration traces had "
                             "enough decode gaps to measure a decode scale")
    return pooled_calibration(parts, out), parts


def prefill_spread(calibration: PrefillScale | None, runs: list[RunScale]) -> str:
    """The calibration traces' prefill scale, then the study runs' min–max (not used): '—' where none was
    measured (an SGLang instance without a step log)."""
    if calibration is None:
        return "—"
    got = [r.prefill.scale for r in runs if r.prefill is not None]
    rest = f"; study runs {min(got):.2f}–{max(got):.2f} (not used)" if got else ""
    return f"{calibration.scale:.2f}{rest}"


def scaled_checks(out: Path, conditions: list[tuple[float, float]], runs: list[RunScale], kind: str) -> pd.DataFrame:
    """The targets, cell by cell, when every run's twin is scaled by the decode speed each run carries:
    its own (``own-scale``, not a prediction), its predecessor's (``tracking``) or its instance's other
    seeds' (``other-seeds``)."""
    checks = []
    for cond in [cell(r, s) for r, s in conditions]:
        sides = scaled_sides(out, [r for r in runs if r.path.parent.parent.name == cond], kind)
        if not sides.empty:
            checks.append(target_checks(cond, *study_tables(sides)))
    return pd.concat(checks, ignore_index=True) if checks else pd.DataFrame(columns=["target", "met"])


def known_cells(out: Path, rate: float | None) -> Cells | None:
    """The cells if already decided: given (--rate) or pinned by an earlier run."""
    if rate is not None:
        return [(rate, SHARINGS[0])]
    pinned = out / "conditions.json"
    if not pinned.is_file():
        return None
    doc = json.loads(pinned.read_text())
    print(f"cells pinned in {pinned} (knee {doc['knee']:.2f} DAG/s): {doc['conditions']}", file=sys.stderr)
    return [(float(r), float(s)) for r, s in doc["conditions"]]


def fit_family(out: Path, family: str, latencies: bool = True) -> Path:
    """Fit one engine family's CPU profile on every probe of it → OUT/profiles/cpu-<family>.yaml (with
    ``latencies``, SGLang's with its probed instance's measured latencies: ``calibrate.twin.steplog``)."""
    base = fit_base(out, family) if latencies else "cpu-base"
    return fit_to(probe_dirs(out, family), family, out / "profiles" / f"cpu-{family}.yaml", base)


def fit_to(dirs: list[Path], family: str, dest: Path, base: str = "cpu-base") -> Path:
    """Fit a profile for one engine family on these probe records → dest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fit_probes(dirs, "vllm-v1" if family == "vllm" else "sglang", "tiny-llama", base, dest)
    return dest


def knee_profile(out: Path) -> Path:
    """SGLang's profile for the capacity search: fitted on its default configuration's probes alone
    (``KNEE_PROBES``), so the cells are known before that instance serves its runs. Fitted on both SGLang
    probe sets instead, the recorded studies' knees were the same to the second decimal (0.44 and 0.60)."""
    return fit_to([out / "probes" / PROBED[KNEE_PROBES][0]], "sglang", out / "profiles" / "knee-sglang.yaml")


def knee_cells(out: Path, quick: bool) -> Cells:
    """Cells around the knee of SGLang's fitted twin (capacity search), pinned in OUT/conditions.json."""
    search = DESIGN.cells.search
    sc = scenario_from_dict(scenario(1.0, SHARINGS[0], search.seconds, search.seed))
    cap = capacity_search(sc, "sglang-current", str(knee_profile(out)), "tiny-llama",
                          {"max_total_tokens": 65536, **CONFIGS[KNEE_PROBES][1]},
                          lo=search.lo, hi=search.hi, seeds=(search.seed,), context=8192, pace="realised",
                          measure=run_metrics, keeps_fraction=KEEPS_PACE)
    knee = cap.keeps_rate
    plan = DESIGN.cells.quick if quick else DESIGN.cells.full
    conditions = [(round(times * knee, 2), sharing) for times, sharing in plan]
    (out / "conditions.json").write_text(json.dumps({"knee": knee, "conditions": conditions}) + "\n")
    print(f"simulated SGLang knee ≈ {knee:.2f} DAG/s; conditions {conditions}", file=sys.stderr)
    return conditions


def study_cells(out: Path, quick: bool, rate: float | None) -> Callable[[], Cells | None]:
    """The study's cells as the engines learn them: known, or found once SGLang's default configuration
    has been probed; None before that."""
    found: list[Cells] = []

    def cells() -> Cells | None:
        if not found:
            got = known_cells(out, rate)
            if got is None and pending_probe(out, KNEE_PROBES) is None:
                got = knee_cells(out, quick)
            if got is not None:
                found.append(got)
        return found[0] if found else None
    return cells


def cell_tables(out: Path, cond: str, lives: list[RunRecord], profiles: dict[str, Path], sim_root: Path,
                figures: bool) -> tuple[list[str], pd.DataFrame]:
    """One cell's report sections and target rows (its live runs given), each configuration simulated with
    its profile."""
    sides = []
    for label in CONFIGS:
        sub = [r for r in lives if r.meta["engine"] == label]
        if sub:
            sim_dir = sim_root / cond / CONFIGS[label][0]
            sides.append(compare(sub, sim_dir, str(profiles[label]), "tiny-llama")["side_by_side"])
    sbs = pd.concat(sides, ignore_index=True)
    if figures:
        measured_vs_simulated(sbs, out / "figures" / cond)
    gaps, phi, per_config = study_tables(sbs)
    parts = [f"## {cond}: the client (dispatch lag: send time minus planned time; over 10 ms the client's own "
             "queueing is in its timestamps) and the engine's busiest process (CPUs it used, share of the run "
             "its threads waited for a CPU; mean over seeds)\n", to_markdown(client_table(lives)), "",
             f"## {cond}: keeps pace (achieved / realised load; keeps pace at ≥ {KEEPS_PACE})\n",
             to_markdown(keeps_pace_table(sbs)),
             f"\n## {cond}: measured vs simulated per configuration\n", to_markdown(per_config),
             f"\n## {cond}: gaps (pairs of configurations, paired by seed)\n", to_markdown(gaps),
             f"\n## {cond}: decomposition φ\n", to_markdown(phi)]
    return parts, target_checks(cond, gaps, phi, per_config)


def summarise(out: Path, conditions: list[tuple[float, float]], repeats: list[Path] | None = None,
              latencies: bool = True, calibration: str = CALIBRATIONS[0]) -> str:
    """The report: targets with each instance's calibrated profile — its own calibration traces' scales
    (``calibration`` 'instance') or its engine's pooled ('engine'), the other counted beside it — (and, beside
    them, the probe-only counts and, for each repeat study given, the counts its live runs reach against this
    study's), then per cell the client, keeps-pace, per-configuration, gap and φ tables."""
    if calibration not in CALIBRATIONS:
        raise ServetwinError(f"twin study: calibration {calibration!r} unknown; accepted: {', '.join(CALIBRATIONS)}")
    cal = calibrate_instances(out, latencies)
    scales, runs = cal.scales, cal.runs
    pooled_profiles = {**cal.profiles, **cal.pooled}
    profiles, beside = ((pooled_profiles, cal.profiles) if calibration == "engine" else (cal.profiles, pooled_profiles))
    cells = [cell(r, s) for r, s in conditions]
    lives = {cond: [read_run(p) for p in find_runs([out / "live" / cond])] for cond in cells}
    parts: list[str] = []
    checks: list[pd.DataFrame] = []
    for cond in lives:
        p, c = cell_tables(out, cond, lives[cond], profiles, out / "sim", figures=True)
        parts += p
        checks.append(c)
    table = pd.concat(checks, ignore_index=True) if checks else pd.DataFrame()
    table.to_csv(out / TARGETS_FILE, index=False)
    calibrated = not scales.empty
    whose = (f"its calibration traces (seed {CALIBRATION_SEED}) measured" if calibration == "instance" else
             f"the calibration traces (seed {CALIBRATION_SEED}) of every instance of its engine measured, pooled")
    what = (f"profiles fitted on probes, each instance's decode and prefill steps scaled as {whose}: every study "
            "seed is held out" if calibrated else
            "profiles fitted on probes only: every study seed is held out")
    if latencies:
        what += "; SGLang's front-end and output-path latencies as its step logs measured"
        if any(vllm_step_log(out, label) for label in CONFIGS):
            what += ", vLLM's front-end loop as its step logs measured"
    metas = [r.meta for rs in lives.values() for r in rs]
    calibrated_at = [served_at(d) for label in CONFIGS for d in calibration_dirs(out, label)]
    head = [f"Host CPU of the live runs: {host_cpus(metas)}\n",
            f"Study runs served: {serving_order(metas, calibrated_at)}\n",
            f"## Targets ({what})\n"]
    if not table.empty:
        by, tracking_part = met_counts(table), []
        if calibrated:
            probe_only = {label: family_profile(out, label) for label in CONFIGS}
            plain = pd.concat([cell_tables(out, cond, lives[cond], probe_only, out / "sim-probe-only", figures=False)[1]
                               for cond in lives], ignore_index=True)
            by["met with probe-only profiles"] = met_counts(plain)["met"].reindex(by.index)
            tracked = scaled_checks(out, conditions, runs["tracking"], "tracking")
            by[TRACKING_COLUMN] = met_counts(tracked)["met"].reindex(by.index)
            crossed = scaled_checks(out, conditions, runs["other-seeds"], "other-seeds")
            by[CROSS_COLUMN] = met_counts(crossed)["met"].reindex(by.index)
            other = pd.concat([cell_tables(out, cond, lives[cond], beside, out / f"sim-{BESIDE[calibration][0]}",
                                           figures=False)[1] for cond in lives], ignore_index=True)
            by[BESIDE[calibration][1]] = met_counts(other)["met"].reindex(by.index)
            by[OWN_SCALE_COLUMN] = met_counts(scaled_checks(out, conditions, runs["own-scale"], "own-scale"))[
                "met"].reindex(by.index)
            tracking_part = ["## The tracking twin's per-engine checks (each run's decode steps scaled by the run "
                             "its instance served before it; the first by the calibration traces)\n",
                             to_markdown(tracked[tracked["target"].str.startswith("engine")].drop(
                                 columns=["same_side", "in_measured_ci"], errors="ignore")), "",
                             "## The cross-validated twin's checks (each run's decode and prefill steps scaled as its "
                             "instance measured them on its calibration traces and its runs of the other seeds)\n",
                             to_markdown(crossed), ""]
        rep_parts = []
        for rep in repeats or []:
            got = pd.concat([repeat_checks(out, rep, cell(r, s)) for r, s in conditions], ignore_index=True)
            if got.empty:
                raise ServetwinError(f"{rep}: no live run of this study's cells, configurations and seeds")
            col = f"met by a repeat of the live runs ({rep.name})"
            by[col] = met_counts(got)["met"].reindex(by.index)
            rep_parts += [f"## The live runs against a repeat of themselves ({rep.name}: the same traces on other "
                          "engine instances, in the simulator's place)\n",
                          to_markdown(got.rename(columns={"measured": "this_study", "simulated": "repeat",
                                                          "in_measured_ci": "repeat_in_this_ci"})), ""]
        head += [to_markdown(by.reset_index()), "", to_markdown(table), ""] + tracking_part + rep_parts
    fits = fit_table({f"cpu-{family}": out / "profiles" / f"cpu-{family}.yaml" for family in ("vllm", "sglang")})
    if not fits.empty:
        head += ["## Probe fits (each engine's profile on both its probe sets; a coefficient at a bound was set by "
                 "the bound, not the probes)\n", to_markdown(fits), ""]
    if calibrated:
        head += [f"## Decode scale per engine instance (calibration traces: seed {CALIBRATION_SEED}, "
                 f"{CALIBRATION_S:g} s spread over the cells, pooled — one 30-s trace of the first cell in studies "
                 "recorded before per-cell traces; "
                 "live / twin mean decode gap by streaming count)\n",
                 to_markdown(scales), ""]
    head += host_speed_part(out)
    return "\n".join(head + parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    if (why := bad_options(a)) is not None:
        ap.error(why)
    try:
        return study(a)
    except ServetwinError as err:
        print(f"twin study: error: {err}", file=sys.stderr)
        return err.exit_code


def study(a: argparse.Namespace) -> int:
    if not a.no_realtime_client and not a.report_only:
        print(f"client scheduling: {realtime_client()}", file=sys.stderr)
    out = Path(a.out)
    seeds = list(DESIGN.quick_seeds if a.quick else DESIGN.seeds)
    duration = RUN_S
    cells = study_cells(out, a.quick, a.rate)
    if a.report_only:
        require_recorded(out, seeds, duration, cells())
    else:
        if a.interleave:
            run_interleaved(out, seeds, duration, cells, a.vllm_step_log, a.warm_up, a.calibration_slots)
        else:
            run_engines(out, seeds, duration, cells, a.vllm_step_log, a.warm_up)  # each instance: probes, then runs
    fit_family(out, "vllm")
    fit_family(out, "sglang", a.path_latencies)
    conditions = cells()
    assert conditions is not None                     # every probe ran, so the knee was found
    report = summarise(out, conditions, [Path(r) for r in a.repeat_of], a.path_latencies, a.calibration)
    (out / "report.md").write_text(report)
    print(report)
    return 0
