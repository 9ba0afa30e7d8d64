"""A local engine instance paused and continued: every process of its group stops taking CPU and comes
back, and a paused instance still stops cleanly (a process stands in for the engine)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from live.local_engine import VllmCpu

# SIGINT handled as the engines' servers handle it (they install their own handler): a test run started in the
# background by a shell inherits SIGINT ignored, which Python then keeps. It says "ready" once its handler is in
# and its child started: on a loaded host a fixed sleep could end before that, and stop() then waited out 30 s
CHILD = ("import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
         "print('ready', flush=True); time.sleep(60)")


def states(pgid: int) -> set[str]:
    """The scheduler states (/proc/<pid>/stat) of every process in the group."""
    got = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            got.add(fields[0])
    return got


def wait_for(pgid: int, want: set[str]) -> set[str]:
    """The group's states once they are ``want`` (a signal is delivered asynchronously), or after 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and states(pgid) != want:
        time.sleep(0.05)
    return states(pgid)


def test_a_paused_instance_stops_all_its_processes_and_resumes_and_stops(tmp_path: Path) -> None:
    eng = VllmCpu(Path("model"), log_path=tmp_path / "engine.log")
    eng._proc = subprocess.Popen([sys.executable, "-c", CHILD], start_new_session=True, stdout=subprocess.PIPE,
                                 text=True)
    pid = eng._proc.pid
    try:
        assert eng._proc.stdout is not None and eng._proc.stdout.readline().strip() == "ready"
        assert wait_for(pid, {"S"}) == {"S"}
        eng.pause()
        assert wait_for(pid, {"T"}) == {"T"}           # the parent and its child stopped
        eng.resume()
        assert wait_for(pid, {"S"}) == {"S"}
        eng.pause()
        signals = [ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if ln.startswith(("State", "Sig", "ShdPnd"))]    # what the stand-in blocks, ignores, catches
        started = time.monotonic()
        eng.stop()                                        # continued first, then interrupted: no 30-s wait
        took = time.monotonic() - started
        assert eng._proc.poll() is not None and took < 10, (took, signals)
        eng.resume()                                      # nothing to continue once stopped
    finally:
        eng.kill()
        subprocess.run(["pkill", "-KILL", "-g", str(pid)], check=False)
