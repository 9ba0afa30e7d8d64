"""An engine instance's calibration traces in the twin study and the held-out scales they give.

Each instance serves a calibration trace (seed 0 of the first cell, not a study seed) before its study runs
and — since `twin-x` — the same trace again after them (``calibrate.twin_live.closing_dir``). Its held-out
twin is scaled by what the two measured together, so the scales bracket the runs in time: an instance's
speed moves while it serves (docs/twin-study.md), and a trace served only first sees the start of it.
Studies recorded before closing traces existed keep the opening trace's scales alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis.records import read_run
from calibrate.decode_load import DecodeScale, measure
from calibrate.twin_own_scale import RunScale, pooled_decode, pooled_prefill
from calibrate.twin_steplog import PrefillScale, run_prefill_scale
from scenarios.errors import ServetwinError

MODEL = "tiny-llama"


def calibration_scales(out: Path, label: str, trace: Path, fitted: Path) -> RunScale | None:
    """One calibration trace of the instance with the decode and prefill scales it measured against the
    family's fit (None: not recorded)."""
    if not (trace / "run.json").is_file():
        return None
    live = read_run(trace)
    return RunScale(trace, live, fitted, measure(live, str(fitted), MODEL),
                    prefill=run_prefill_scale(out, label, trace, fitted))


def held_out_scales(out: Path, traces: Sequence[RunScale | None]) -> tuple[DecodeScale, PrefillScale | None, str]:
    """The scales an instance's held-out twin takes: its calibration traces' (opening, and closing where
    recorded), pooled by gaps and forwards (``pooled_decode``, ``pooled_prefill``), and what they were
    measured on. Bracketing the study runs in time: over five studies, pooling the opening trace with the
    instance's last run (a stand-in for a closing trace) predicted the decode scale of its other eight runs
    with a mean |log ratio| of 0.107 against the opening trace's 0.141 (docs/twin-study.md)."""
    got = [t for t in traces if t is not None]
    decode = [t.scale for t in got if t.scale is not None]
    prefill = [t.prefill for t in got if t.prefill is not None]
    if not decode:
        raise ServetwinError(f"{got[0].path}: no decode gaps to measure the instance's decode scale from")
    source = " + ".join(str(t.path.relative_to(out)) for t in got)
    return (decode[0] if len(decode) == 1 else pooled_decode(decode),
            None if not prefill else prefill[0] if len(prefill) == 1 else pooled_prefill(prefill), source)


def trace_pair(opening: RunScale, closing: RunScale | None) -> str:
    """The decode scale of each calibration trace: opening / closing ('—' where not recorded)."""
    def one(t: RunScale | None) -> str:
        return "—" if t is None or t.scale is None else f"{t.scale.scale:.2f}"
    return f"{one(opening)} / {one(closing)}"
