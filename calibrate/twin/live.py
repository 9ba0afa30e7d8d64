"""The live side of the two-engine study: its configurations, traces and the engine instances that serve
them (``calibrate.twin.study`` fits, simulates and reports).

One instance per configuration: a probed configuration's instance is probed first and then serves its
calibration traces and study seeds, so the profile, the instance's decode scale and its held-out runs come
from the same instance, and no instance is started twice. The cells must be known before a study run:
given (``--rate``), pinned in ``OUT/conditions.json``, or found from SGLang's fitted twin on its default
configuration's probes (``KNEE_PROBES``), which therefore goes first: its instance is probed, the knee is
searched (seconds), and the same instance serves its runs. Five engine starts in every study."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.probes import ProbePlan, probe
from calibrate.twin.design import load_design, scenario_dict
from foundation.errors import ServetwinError
from live.dispatcher import DispatchConfig
from live.local_engine import ROOT, LocalEngine, SglangCpu, VllmCpu, free_port, tiny_model
from live.run import LiveOptions, run_live
from scenarios.compiler import build_trace, compile_trace
from scenarios.spec import scenario_from_dict
from scenarios.trace import Trace

DESIGN = load_design()            # scenarios/grids/twin-cpu.yaml: what the study is
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {k: (c.engine, dict(c.set)) for k, c in DESIGN.configurations.items()}
ORDER = DESIGN.order
KNEE_PROBES = DESIGN.knee_probes
SHARINGS = tuple(dict.fromkeys(s for _, s in DESIGN.cells.full))   # the rate sweep's σ, then the sharing sweep's


def scenario(rate: float, sharing: float, duration: float, seed: int) -> dict[str, Any]:
    return scenario_dict(DESIGN, rate, sharing, duration, seed)


def request_shape(sharing: float) -> tuple[int, int]:
    """A study request's (cached prefix, new suffix) tokens at this σ, as its traces compile them."""
    prompts = scenario_from_dict(scenario(1.0, sharing, 10.0, 0)).prompts
    return prompts.F, prompts.D


def _plans() -> dict[str, tuple[str, ProbePlan]]:
    """Each probed configuration's directory under OUT/probes and its probe plan (the design's ``probes``)."""
    spec = DESIGN.probe_plan
    cached = (*ProbePlan().cached, *(request_shape(s) for s in SHARINGS)) if spec.cached_study_shapes \
        else ProbePlan().cached
    study = ProbePlan(repeats=spec.repeats, decode_batches=spec.decode_batches, shared_decode=spec.shared_decode,
                      cached=cached)
    chunking = replace(ProbePlan.chunking(repeats=spec.repeats), cached=cached)
    out = {}
    for label, p in DESIGN.probes.items():
        plan = study if p.plan == "study" else chunking
        if p.batched:
            plan = replace(plan, batched=tuple((*request_shape(SHARINGS[0]), k) for k in p.batched))
        out[label] = (p.dir, plan)
    return out


PROBED = _plans()
CALIBRATION_SEED, CALIBRATION_S = DESIGN.calibration.seed, DESIGN.calibration.seconds
WARM_UP_SEED = DESIGN.warm_up_seed
RUN_S = DESIGN.run_s

Cells = list[tuple[float, float]]


def cell(rate: float, sharing: float) -> str:
    return f"rate{rate:g}-sigma{sharing:g}"


def calibration_scenario(rate: float, sharing: float, seconds: float = CALIBRATION_S,
                         seed: int = CALIBRATION_SEED) -> dict[str, Any]:
    """One of an instance's calibration traces: seed ``CALIBRATION_SEED`` of the cell, its gamma arrivals
    moved to start with the first DAG at 0 (a ``replay`` of them), then ``seconds`` of them. Unmoved, seed
    0's first DAG came 13.7 s into a 30-s trace at λ = 0.39, and the calibration rested on the 6 DAGs of its
    last 16 s; moved, the same 30 s serve 14."""
    sc = scenario(rate, sharing, 2 * max(seconds, CALIBRATION_S), seed)
    arrays = build_trace(scenario_from_dict(sc)).arrays
    times = arrays["arrival_s"][np.unique(arrays["dag"], return_index=True)[1]]      # each DAG's arrival
    moved = times - times[0]
    sc["arrivals"] = {"kind": "replay", "times": [float(t) for t in moved[moved < seconds]]}
    return {**sc, "duration_s": seconds}


def calibration_dir(out: Path, label: str, cell_name: str) -> Path:
    """Where the instance's calibration trace of one cell is recorded."""
    return out / "calibration" / label / cell_name / f"seed-{CALIBRATION_SEED}"


def calibration_dirs(out: Path, label: str) -> list[Path]:
    """The instance's recorded calibration traces, in the order it served them: one per cell,
    or the single trace of a study recorded before (``calibration/<label>/seed-0``)."""
    root = out / "calibration" / label
    found = [root / f"seed-{CALIBRATION_SEED}"] + sorted(root.glob(f"*/seed-{CALIBRATION_SEED}"))
    return sorted((d for d in found if (d / "run.json").is_file()), key=served_at)


def single_trace_calibration(out: Path, label: str) -> bool:
    """Whether the instance was calibrated on one trace of the first cell (a study recorded before per-cell
    calibration traces): it keeps it, and resuming or regenerating that study records no per-cell traces
    beside it (they would come from a new instance, not the one that served the runs)."""
    return (out / "calibration" / label / f"seed-{CALIBRATION_SEED}" / "run.json").is_file()


def served_at(run_dir: Path) -> float:
    """When a recorded live run began (``start_unix`` of its run.json)."""
    return start_unix(json.loads((run_dir / "run.json").read_text()), run_dir)


def start_unix(meta: dict[str, Any], run_dir: Path) -> float:
    """When a live run began (Unix seconds), as every live run records it in its ``run_window``; the
    study orders an instance's runs and calibration traces by it."""
    when = meta.get("run_window", {}).get("start_unix")
    if when is None:
        raise ServetwinError(f"{run_dir}/run.json: run_window.start_unix missing; the study orders an "
                             "instance's runs by when they started (recorded by every live run)")
    return float(when)


def calibration_runs(out: Path, label: str, cells: Cells) -> list[tuple[dict[str, Any], Path]]:
    """The instance's calibration traces: ``CALIBRATION_S`` seconds spread over the cells, in their order."""
    seconds = CALIBRATION_S / len(cells)
    return [(calibration_scenario(r, s, seconds), calibration_dir(out, label, cell(r, s))) for r, s in cells]


def warm_up_runs(out: Path, label: str, cells: Cells, seconds: float) -> list[tuple[dict[str, Any], Path]]:
    """``seconds`` of agent traffic spread over the cells as the calibration traces are (seed ``WARM_UP_SEED``),
    in ``OUT/warm-up/<config>/<cell>/seed-4``: served before the calibration traces, used by no twin."""
    each = seconds / len(cells)
    return [(calibration_scenario(r, s, each, WARM_UP_SEED),
             out / "warm-up" / label / cell(r, s) / f"seed-{WARM_UP_SEED}") for r, s in cells]


def probe_dirs(out: Path, family: str) -> list[Path]:
    """Every probe record of one engine family (each configuration it was probed in)."""
    dirs = [out / "probes" / d for label, (d, _) in PROBED.items() if CONFIGS[label][0] == family]
    return [d for d in dirs if (d / "run.json").is_file()]


def engine(kind: str, opts: dict[str, Any], log: Path, vllm_steps: bool = False) -> LocalEngine:
    """The configuration's local instance, logging to ``log``: SGLang's forwards always to ``<log>.steps.<pid>``
    (calibrate.engine_steps); vLLM's iterations to ``<log>.steps`` with ``vllm_steps`` (read by the
    vllm-admission diagnosis)."""
    model = tiny_model(ROOT / ".engine-venv" / "tiny-llama")
    if kind == "sglang":
        return SglangCpu(model, free_port(), log_path=log, step_log=log.with_suffix(".steps"), **opts)
    return VllmCpu(model, free_port(), log_path=log, step_log=log.with_suffix(".steps") if vllm_steps else None,
                   **opts)


def pending_probe(out: Path, label: str) -> Path | None:
    """Where this configuration's probes go, if it is probed and not yet."""
    if label not in PROBED:
        return None
    dest = out / "probes" / PROBED[label][0]
    return None if (dest / "run.json").is_file() else dest


def pending_runs(out: Path, label: str, cells: Cells, seeds: list[int], duration: float,
                 warm_up: float = 0.0) -> list[tuple[dict[str, Any], Path]]:
    """The configuration's runs not yet recorded: its calibration traces (seed 0 of each cell) first, and
    ``warm_up`` seconds of warm-up traffic before them where they are still to be served."""
    todo = [(scenario(r, s, duration, seed), out / "live" / cell(r, s) / label / f"seed-{seed}")
            for r, s in cells for seed in seeds]
    if cells and not single_trace_calibration(out, label):
        todo = calibration_runs(out, label, cells) + todo
    left = [t for t in todo if not (t[-1] / "run.json").is_file()]
    if warm_up > 0 and any(d.is_relative_to(out / "calibration") for _, d in left):
        left = warm_up_runs(out, label, cells, warm_up) + left
    return left


def unrecorded(out: Path, seeds: list[int], duration: float, cells: Cells | None) -> list[Path]:
    """What the study has yet to record — probes, calibration traces, study runs — in the order it would
    (runs only once the cells are known)."""
    missing: list[Path] = []
    for label in ORDER:
        if (p := pending_probe(out, label)) is not None:
            missing.append(p)
        if cells is not None:
            missing += [dest for _, dest in pending_runs(out, label, cells, seeds, duration)]
    return missing


def require_recorded(out: Path, seeds: list[int], duration: float, cells: Cells | None) -> None:
    """An error naming what is missing unless every probe and run of the study is recorded (a report
    rebuilt from the records alone: ``--report-only``)."""
    if cells is None:
        raise ServetwinError(f"{out}: the study's cells are not known (no conditions.json, and SGLang's default "
                             "configuration not probed): nothing to report; run without --report-only to record it")
    missing = unrecorded(out, seeds, duration, cells)
    if missing:
        names = ", ".join(str(p.relative_to(out)) for p in missing[:3]) + (", …" if len(missing) > 3 else "")
        raise ServetwinError(f"{out}: {len(missing)} probe or run record(s) missing ({names}); run without "
                             "--report-only to record them (that starts the engines)")


def serve(out: Path, label: str, seeds: list[int], duration: float, cells: Callable[[], Cells | None],
          vllm_steps: bool = False, warm_up: float = 0.0) -> bool:
    """Start this configuration's instance if it has anything to do: its probes (if probed and not yet),
    then — once ``cells()`` knows the cells — its calibration traces and study seeds. False when its runs
    are left for a later call because the cells were not known yet."""
    kind, opts = CONFIGS[label]
    probe_to, known = pending_probe(out, label), cells()
    todo = pending_runs(out, label, known, seeds, duration, warm_up) if known is not None else []
    if probe_to is None and not todo:
        return known is not None                 # nothing to run now: no engine start (its log is kept)
    eng = engine(kind, opts, out / "logs" / f"{label}.log", vllm_steps).start()
    try:
        if probe_to is not None:
            probe(eng.url, "tiny-llama", probe_to, PROBED[label][1], str(eng.log_path))
            print(f"  {probe_to.relative_to(out)}: probed", file=sys.stderr)
        if known is None:
            known = cells()
            if known is None:
                return False
            todo = pending_runs(out, label, known, seeds, duration, warm_up)
        for sc, dest in todo:
            record_run(eng, label, compile_trace(scenario_from_dict(sc)), dest, out)
    finally:
        eng.stop()
    return True


def record_run(eng: LocalEngine, label: str, trace: Trace, dest: Path, root: Path) -> None:
    """One live run on a started instance as the study serves it (a 5-request warm-up, then the prefix
    cache emptied, as its twin starts), its outcome printed by its path under ``root``."""
    rec = run_live(trace, DispatchConfig(endpoint=eng.url, model="tiny-llama", warmup=5),
                   LiveOptions(label, engine_log=str(eng.log_path), engine_pid=eng.pid, cold_cache=True), dest)
    print(f"  {dest.relative_to(root)}: {'passed' if rec.meta['passed'] else 'FAILED'}", file=sys.stderr)


def run_engines(out: Path, seeds: list[int], duration: float, cells: Callable[[], Cells | None],
                vllm_steps: bool = False, warm_up: float = 0.0) -> None:
    """Every configuration's probes and runs, one instance at a time in ``ORDER``; those whose cells were
    not known while their instance ran are started again once they are. ``vllm_steps``: each vLLM instance
    also logs its iterations (``OUT/logs/<config>.steps``); ``warm_up``: seconds of traffic each instance serves
    before its calibration traces (``warm_up_runs``)."""
    later = [label for label in ORDER if not serve(out, label, seeds, duration, cells, vllm_steps, warm_up)]
    for label in later:
        if not serve(out, label, seeds, duration, cells, vllm_steps, warm_up):
            raise RuntimeError(f"{label}: the study's cells are still unknown after every probe")


def rotated(k: int) -> tuple[str, ...]:
    """The configurations in ``ORDER`` rotated by ``k`` (the order of the interleaved study's k-th slot), so that
    no configuration always serves first or last of a slot."""
    k %= len(ORDER)
    return ORDER[k:] + ORDER[:k]


def slots(cells: Cells, seeds: list[int], calibration_slots: bool = False) -> list[tuple[float, float, int]]:
    """The interleaved study's slots, in the order served: each cell's seeds, cell by cell (the order each
    instance serves them in a study that runs one instance at a time); with ``calibration_slots``, each cell's
    seeds after a slot of its calibration traces (seed ``CALIBRATION_SEED``)."""
    first = [CALIBRATION_SEED] if calibration_slots else []
    return [(r, s, seed) for r, s in cells for seed in first + seeds]


def slot_run(out: Path, label: str, r: float, s: float, seed: int, duration: float,
             cells: Cells) -> tuple[dict[str, Any], Path]:
    """What one configuration serves in a slot: the cell's study seed, or its calibration trace."""
    if seed == CALIBRATION_SEED:
        return calibration_scenario(r, s, CALIBRATION_S / len(cells)), calibration_dir(out, label, cell(r, s))
    return scenario(r, s, duration, seed), out / "live" / cell(r, s) / label / f"seed-{seed}"


def open_instance(out: Path, label: str, seeds: list[int], duration: float, cells: Callable[[], Cells | None],
                  vllm_steps: bool = False, warm_up: float = 0.0,
                  calibration_slots: bool = False) -> LocalEngine | None:
    """Start this configuration's instance if it has anything left to serve, serve its probes (if probed and not
    yet), warm-up and — unless ``calibration_slots`` leaves them to the slots — calibration traces, and pause it
    (``VllmCpu.pause``); None where it has nothing left. An error where the cells are still unknown after its
    probes."""
    kind, opts = CONFIGS[label]
    probe_to, known = pending_probe(out, label), cells()
    if probe_to is None and known is not None and not pending_runs(out, label, known, seeds, duration, warm_up):
        return None
    eng = engine(kind, opts, out / "logs" / f"{label}.log", vllm_steps).start()
    try:
        if probe_to is not None:
            probe(eng.url, "tiny-llama", probe_to, PROBED[label][1], str(eng.log_path))
            print(f"  {probe_to.relative_to(out)}: probed", file=sys.stderr)
        known = cells()
        if known is None:
            raise ServetwinError(f"{label}: the study's cells are unknown after its probes; the interleaved study "
                                 f"needs them once {KNEE_PROBES}, first in the order, has been probed")
        later = [out / "live"] + ([out / "calibration"] if calibration_slots else [])
        for sc, dest in pending_runs(out, label, known, seeds, duration, warm_up):
            if not any(dest.is_relative_to(d) for d in later):
                record_run(eng, label, compile_trace(scenario_from_dict(sc)), dest, out)
    except BaseException:
        eng.stop()
        raise
    eng.pause()
    return eng


def run_interleaved(out: Path, seeds: list[int], duration: float, cells: Callable[[], Cells | None],
                    vllm_steps: bool = False, warm_up: float = 0.0, calibration_slots: bool = False) -> None:
    """Every configuration's probes and runs with every instance held at once: each instance is started in
    ``ORDER``, probed, serves its warm-up and calibration traces and is paused (SIGSTOP: no CPU, its memory and
    caches kept); then the study runs go slot by slot (``slots``), each slot's configurations in a rotated order
    (``rotated``), each instance continued for its run and paused again. A change of the host's speed over the
    study then falls on every configuration's runs alike, where one instance at a time (``run_engines``) gives
    it to whichever instance was serving. Five instances are resident together (11 GB in use on a 2-core
    Xeon). With ``calibration_slots`` the calibration traces are slots too: each cell's, on every
    configuration, just before that cell's study slots, so the calibration spans the study's time as its runs
    do (interleaved studies that served them all first saw the host change speed after them)."""
    held: dict[str, LocalEngine] = {}
    try:
        for label in ORDER:
            eng = open_instance(out, label, seeds, duration, cells, vllm_steps, warm_up, calibration_slots)
            if eng is not None:
                held[label] = eng
        known = cells()
        assert known is not None                      # open_instance raises while it is not
        for k, (r, s, seed) in enumerate(slots(known, seeds, calibration_slots)):
            for label in rotated(k):
                sc, dest = slot_run(out, label, r, s, seed, duration, known)
                if label not in held or (dest / "run.json").is_file() or (
                        seed == CALIBRATION_SEED and single_trace_calibration(out, label)):
                    continue
                held[label].resume()
                try:
                    record_run(held[label], label, compile_trace(scenario_from_dict(sc)), dest, out)
                finally:
                    held[label].pause()
    finally:
        for eng in held.values():
            eng.stop()

