"""The client host's state over a live run, so that a run disturbed by its machine can be told apart from
a slow engine: CPU time stolen by the hypervisor (``/proc/stat``), time with runnable tasks waiting for a
CPU (``/proc/pressure/cpu``, "some") and the load average at the end. Linux only; on other systems, or
where a file is missing, the field is None. When the engine runs on the same host (a local engine) this
is the engine's host too."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")


@dataclass(frozen=True)
class HostSample:
    steal_s: float | None                   # all CPUs together
    cpu_pressure_s: float | None            # "some" stall time


def _steal_s(proc: Path) -> float | None:
    try:
        fields = (proc / "stat").read_text().splitlines()[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[0] == "cpu" and len(fields) > 8 else None
    except (OSError, ValueError, IndexError):
        return None


def _pressure_s(proc: Path) -> float | None:
    try:
        for line in (proc / "pressure" / "cpu").read_text().splitlines():
            if line.startswith("some "):
                total = dict(kv.split("=", 1) for kv in line.split()[1:])["total"]
                return int(total) / 1e6
    except (OSError, ValueError, KeyError):
        return None
    return None


def sample(proc: Path = PROC) -> HostSample:
    return HostSample(_steal_s(proc), _pressure_s(proc))


def summary(start: HostSample, end: HostSample, duration_s: float, proc: Path = PROC) -> dict[str, Any]:
    """Seconds stolen and seconds under CPU pressure during the run, each also as a share of its
    duration, and the 1-minute load average at its end."""
    def delta(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else max(0.0, b - a)

    def share(x: float | None) -> float | None:
        return None if x is None or duration_s <= 0 else x / duration_s

    steal, pressure = delta(start.steal_s, end.steal_s), delta(start.cpu_pressure_s, end.cpu_pressure_s)
    try:
        load: float | None = float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load = None
    return {"cpu_steal_s": steal, "cpu_steal_share": share(steal), "cpu_pressure_s": pressure,
            "cpu_pressure_share": share(pressure), "load_1m": load, "cpus": os.cpu_count()}
