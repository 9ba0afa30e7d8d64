"""The client host's state over a live run, so that a run disturbed by its machine can be told apart from
a slow engine: CPU time stolen by the hypervisor (``/proc/stat``), time with runnable tasks waiting for a
CPU (``/proc/pressure/cpu``, "some") and the load average at the end. Linux only; on other systems, or
where a file is missing, the field is None. When the engine runs on the same host (a local engine) this
is the engine's host too, and given the engine's process id, each of the engine's processes is accounted
for: CPU time its threads ran and time they were runnable but waiting for a CPU (``schedstat``), which
tells an engine short of CPU from one that is slow on its own. The CPU's model name and the vector and matrix
extensions engines' CPU kernels choose between (``/proc/cpuinfo``) say which machine a run measured: two
studies on hosts of different CPUs are not repeats of each other."""

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
    processes: dict[str, tuple[float, float]] | None = None    # "comm pid": (ran s, waited for a CPU s)


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


ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu_identity(proc: Path = PROC) -> dict[str, Any] | None:
    """The first CPU's model name and which of ``ISA_FLAGS`` it has, or None without ``cpuinfo``."""
    try:
        text = (proc / "cpuinfo").read_text()
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break                     # the first processor's block is enough: the others are alike
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"model_name": fields.get("model name"), "isa": [f for f in ISA_FLAGS if f in flags]}


def process_tree(pid: int, proc: Path = PROC) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for d in proc.iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue                  # gone while the table was read
            children.setdefault(ppid, []).append(int(d.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    return tree


def _process_times(pid: int, proc: Path) -> tuple[str, float, float] | None:
    """(name, seconds its threads ran, seconds they waited runnable) from each thread's schedstat."""
    try:
        name = (proc / str(pid) / "comm").read_text().strip()
        ran = waited = 0
        for task in (proc / str(pid) / "task").iterdir():
            fields = (task / "schedstat").read_text().split()
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
    except (OSError, ValueError, IndexError):
        return None                       # gone, or no schedstat on this kernel
    return name, ran / 1e9, waited / 1e9


def sample(proc: Path = PROC, engine_pid: int | None = None) -> HostSample:
    procs = None
    if engine_pid is not None:
        procs = {}
        for p in process_tree(engine_pid, proc):
            t = _process_times(p, proc)
            if t is not None:
                procs[f"{t[0]} {p}"] = (t[1], t[2])
    return HostSample(_steal_s(proc), _pressure_s(proc), procs)


def engine_processes(start: HostSample, end: HostSample, duration_s: float) -> dict[str, dict[str, float]] | None:
    """Per engine process alive at both samples: seconds run and seconds waited for a CPU during the run,
    each also as a share of the run (a share above 1 is more than one thread at a time). A thread that
    ended during the run takes its time with it, so each figure is a lower bound."""
    if start.processes is None or end.processes is None or duration_s <= 0:
        return None
    out = {}
    for key, (ran1, wait1) in end.processes.items():
        if key in start.processes:
            ran0, wait0 = start.processes[key]
            ran, waited = max(0.0, ran1 - ran0), max(0.0, wait1 - wait0)
            out[key] = {"cpu_s": ran, "cpu_share": ran / duration_s,
                        "wait_s": waited, "wait_share": waited / duration_s}
    return out


def summary(start: HostSample, end: HostSample, duration_s: float, proc: Path = PROC) -> dict[str, Any]:
    """Seconds stolen and seconds under CPU pressure during the run, each also as a share of its
    duration, the 1-minute load average at its end, and the CPU (``cpu_identity``)."""
    def delta(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else max(0.0, b - a)

    def share(x: float | None) -> float | None:
        return None if x is None or duration_s <= 0 else x / duration_s

    steal, pressure = delta(start.steal_s, end.steal_s), delta(start.cpu_pressure_s, end.cpu_pressure_s)
    try:
        load: float | None = float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load = None
    out: dict[str, Any] = {"cpu_steal_s": steal, "cpu_steal_share": share(steal), "cpu_pressure_s": pressure,
                           "cpu_pressure_share": share(pressure), "load_1m": load, "cpus": os.cpu_count(),
                           "cpu": cpu_identity(proc)}
    procs = engine_processes(start, end, duration_s)
    if procs is not None:
        out["engine_processes"] = procs
    return out
