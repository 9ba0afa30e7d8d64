"""The two-engine study's options, shared by ``servetwin twin-study`` and ``servetwin twin-study``
(kept apart from the study so that building the CLI's parser imports nothing heavy)."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundation.errors import ServetwinError

# the held-out twin's calibrations (calibrate.twin.study), the default first: its engine's calibration traces
# pooled (docs/twin-study.md, "What it runs"), or each instance's own
CALIBRATIONS = ("engine", "instance")


def calibrated_path(out: Path, label: str, calibration: str) -> Path:
    """Where a study keeps a configuration's profile under a calibration: ``OUT/profiles/engine-pooled/<label>.yaml``
    (its engine's calibration traces pooled) or ``OUT/profiles/<label>.yaml`` (its instance's own)."""
    if calibration not in CALIBRATIONS:
        raise ServetwinError(f"calibration {calibration!r} unknown; accepted: {', '.join(CALIBRATIONS)}")
    return out / "profiles" / ("engine-pooled" if calibration == "engine" else "") / f"{label}.yaml"


def seconds(text: str) -> float:
    """A non-negative number of seconds (``--warm-up``)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number of seconds; accepted: a number >= 0")
    return value


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The study's options (``servetwin twin-study`` and ``servetwin twin-study``)."""
    ap.add_argument("--out", default="out/twin")
    ap.add_argument("--quick", action="store_true", help="one cell, 2 seeds, 40-second runs")
    ap.add_argument("--rate", type=float, default=None, help="skip the capacity search; use this DAG rate")
    ap.add_argument("--no-realtime-client", action="store_true",
                    help="leave the client at normal priority (by default it runs at SCHED_FIFO where permitted: "
                         "the engines share its 2 CPUs)")
    ap.add_argument("--no-path-latencies", dest="path_latencies", action="store_false",
                    help="leave out the engines' own latencies that their instances' step logs measured: "
                         "SGLang's front end and output path (by default its twins have them and its probes are "
                         "fitted with them), and a vLLM instance's front-end loop with --vllm-step-log "
                         "(calibrate.twin.steplog, calibrate.vllm_front_end)")
    ap.add_argument("--vllm-step-log", action="store_true",
                    help="each vLLM instance also logs its iterations to OUT/logs/<config>.steps (vLLM's "
                         "--enable-logging-iteration-details; split a run's TTFT with python -m "
                         "calibrate.twin.diagnose.vllm_admission); off by default")
    ap.add_argument("--warm-up", type=seconds, default=0.0, metavar="SECONDS",
                    help="each instance first serves this many seconds of agent traffic spread over the cells "
                         "(seed 4, in OUT/warm-up; used by no twin) before its calibration traces; default 0: "
                         "none (docs/twin-study.md, \"What it runs\")")
    ap.add_argument("--interleave", action="store_true",
                    help="hold every instance at once and serve the study runs slot by slot (each cell's seed on "
                         "every configuration, in a rotated order), each instance paused while another serves; by "
                         "default each instance serves all its runs before the next starts (docs/twin-study.md)")
    ap.add_argument("--calibration-slots", action="store_true",
                    help="with --interleave: serve each cell's calibration traces as a slot of their own, on every "
                         "configuration, just before that cell's study slots, instead of all of them before the "
                         "first slot (docs/studies/twin-5-hosts.md)")
    ap.add_argument("--calibration", choices=CALIBRATIONS, default=CALIBRATIONS[0],
                    help="which calibration the held-out twin uses: 'instance' scales each instance by its own "
                         "calibration traces, 'engine' by the calibration traces of every instance of its engine, "
                         "pooled (the other one is counted beside it); default %(default)s")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild the report from what OUT recorded (twins, tables, figures) and start no engine: "
                         "an error naming what is missing if any probe or run is not recorded")
    ap.add_argument("--repeat-of", action="append", default=[], metavar="DIR",
                    help="another study folder with the same pinned cells: its live runs are held to the targets "
                         "against this study's, in the simulator's place (repeatable)")


def bad_options(a: argparse.Namespace) -> str | None:
    """Why the options cannot be used together (a --repeat-of folder, --calibration-slots without --interleave),
    or None."""
    if getattr(a, "calibration_slots", False) and not a.interleave:
        return ("--calibration-slots: only with --interleave (a study that runs one instance at a time serves each "
                "instance's calibration traces just before its runs already)")
    for rep in a.repeat_of:
        if Path(rep).resolve() == Path(a.out).resolve():
            return f"--repeat-of {rep}: that is the study itself (--out); give another study's folder"
        if not (Path(rep) / "live").is_dir():
            return (f"--repeat-of {rep}: no live/ folder there; give a study folder (the --out of an earlier "
                    "study with the same pinned cells)")
    return None
