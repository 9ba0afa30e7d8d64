"""SGLang's latencies outside its forwards, in the twin study: the front end's (send to the scheduler's
receipt) and the output path's (results processed to the first token at the client), measured by each
SGLang instance's step log on its calibration trace (calibrate/step_log.py).

They are latencies, not engine time: a request's dependants are sent when its last token reaches the
client, and reach the scheduler after the front end, so the forward started meanwhile runs without them.
The probe fit charges each probe's window both latencies (``fit.Window``) instead of its steps: the family
fit takes the probed instance's, each instance's profile its own. A study recorded without step logs
keeps both at 0 (its reports regenerate unchanged).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from calibrate.step_log import measured_latencies, write_latencies
from calibrate.twin_live import CONFIGS, KNEE_PROBES, calibration_dir
from simulator.profiles import load_hardware


def step_log(out: Path, label: str) -> Path:
    """Where the study's instance of this configuration wrote its step log (``PREFIX.<pid>`` files)."""
    return out / "logs" / f"{label}.steps"


def instance_latencies(out: Path, label: str) -> dict[str, Any] | None:
    """The instance's latencies on its calibration trace, or None (not SGLang, or no step log or run)."""
    cal, prefix = calibration_dir(out, label), step_log(out, label)
    if CONFIGS[label][0] != "sglang" or not (cal / "run.json").is_file() or not glob.glob(f"{prefix}.*"):
        return None
    return measured_latencies(cal, prefix)


def fit_base(out: Path, family: str, base: str = "cpu-base") -> str:
    """The profile a family's probe fit starts from: ``base``, with — for SGLang — the latencies of the
    instance that was probed in its default configuration."""
    lat = instance_latencies(out, KNEE_PROBES) if family == "sglang" else None
    if lat is None:
        return base
    dest = out / "profiles" / f"base-{family}.yaml"
    return str(write_latencies(load_hardware(base).path, dest, "sglang", lat,
                               str(calibration_dir(out, KNEE_PROBES).relative_to(out))))


def with_own_latencies(out: Path, label: str, profile: Path) -> Path:
    """The instance's profile with its own latencies (unchanged where none were measured)."""
    lat = instance_latencies(out, label)
    if lat is None:
        return profile
    return write_latencies(profile, profile, "sglang", lat, str(calibration_dir(out, label).relative_to(out)))
