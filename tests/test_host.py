"""live.host: a live run records how much CPU its host lost to other tenants (steal) and to waiting for a
CPU (pressure), so that a run slowed by its machine can be told from a slow engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from live import host


def _proc(root: Path, steal_ticks: int, pressure_us: int, load: str = "1.50 0.9 0.7 2/300 123") -> Path:
    (root / "pressure").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  100 0 50 1000 10 0 5 {steal_ticks} 0 0\ncpu0 50 0 25 500 5 0 2 0 0 0\n")
    (root / "pressure" / "cpu").write_text(f"some avg10=1.00 avg60=0.50 avg300=0.10 total={pressure_us}\n"
                                           "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (root / "loadavg").write_text(load + "\n")
    return root


def test_host_summary_is_the_change_over_the_run(tmp_path: Path):
    hz = os.sysconf("SC_CLK_TCK")
    start = host.sample(_proc(tmp_path / "a", steal_ticks=10, pressure_us=1_000_000))
    end = host.sample(_proc(tmp_path / "b", steal_ticks=10 + 2 * hz, pressure_us=6_000_000))
    s = host.summary(start, end, 10.0, tmp_path / "b")
    assert s["cpu_steal_s"] == pytest.approx(2.0) and s["cpu_steal_share"] == pytest.approx(0.2)
    assert s["cpu_pressure_s"] == pytest.approx(5.0) and s["cpu_pressure_share"] == pytest.approx(0.5)
    assert s["load_1m"] == pytest.approx(1.5) and s["cpus"] == os.cpu_count()


def test_missing_files_give_none_not_an_error(tmp_path: Path):
    empty = tmp_path / "none"
    empty.mkdir()
    s = host.summary(host.sample(empty), host.sample(empty), 10.0, empty)
    assert s["cpu_steal_s"] is None and s["cpu_pressure_share"] is None and s["load_1m"] is None
    assert s["cpu"] is None


def test_a_run_names_the_cpu_it_measured(tmp_path: Path):
    """Two studies on different CPUs are not repeats: the summary carries the first CPU's model name and the
    vector / matrix extensions engines' CPU kernels choose between (here AVX-512 without AMX)."""
    root = _proc(tmp_path / "p", steal_ticks=0, pressure_us=0)
    block = ("processor\t: {n}\nmodel name\t: Example Xeon {n}\n"
             "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n\n")
    (root / "cpuinfo").write_text(block.format(n=0) + block.format(n=1).replace("avx512f", "amx_tile"))
    s = host.summary(host.sample(root), host.sample(root), 1.0, root)
    assert s["cpu"] == {"model_name": "Example Xeon 0", "isa": ["avx2", "avx512f"]}


def test_this_machine_is_read():
    s = host.summary(host.sample(), host.sample(), 1.0)
    if Path("/proc/stat").is_file():
        assert s["cpu_steal_s"] is not None and s["cpu_steal_s"] >= 0


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread schedstat is Linux's")
def test_a_local_engines_processes_are_accounted_for(tmp_path: Path):
    """Given the engine's process id, each process under it gets the CPU its threads used during the run and
    the time they waited for a CPU; a child that spins for 0.4 s of CPU shows about that much, an idle parent
    next to none, and the summary says nothing of processes when no engine was named. The child spins only
    once the first sample is taken and says when it is done, so a loaded host changes how long the window
    is, not what falls in it."""
    import subprocess
    import sys
    import time
    go, done = tmp_path / "go", tmp_path / "done"
    child_code = (f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
                  "t = time.process_time()\nwhile time.process_time() < t + 0.4: pass\n"
                  f"open({str(done)!r}, 'w').close()\ntime.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               f"c = subprocess.Popen([sys.executable, '-c', {child_code!r}])\ntime.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while len(host.process_tree(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        start, t0 = host.sample(engine_pid=parent.pid), time.monotonic()
        go.touch()
        while not done.exists() and time.monotonic() < deadline + 30:
            time.sleep(0.05)
        end, wall = host.sample(engine_pid=parent.pid), time.monotonic() - t0
        s = host.summary(start, end, wall)
    finally:
        for p in reversed(host.process_tree(parent.pid)):
            os.kill(p, 9)
        parent.wait()
    procs = s["engine_processes"]
    assert len(procs) == 2 and all(k.startswith("python") for k in procs)
    child = next(v for k, v in procs.items() if not k.endswith(f" {parent.pid}"))
    assert done.exists() and 0.35 < child["cpu_s"] <= 0.8 and child["wait_s"] >= 0.0
    assert child["cpu_share"] == pytest.approx(child["cpu_s"] / wall)
    assert procs[next(k for k in procs if k.endswith(f" {parent.pid}"))]["cpu_s"] < 0.05
    assert "engine_processes" not in host.summary(host.sample(), host.sample(), 1.0)


def test_live_run_refuses_an_engine_pid_that_is_not_here(tmp_path: Path, capsys):
    from servetwin.cli import main
    code = main(["live", "run", "--scenario", "scenarios/examples/rate-0.12.yaml", "--endpoint", "http://127.0.0.1:9",
                 "--engine-label", "x", "--out", str(tmp_path / "run"), "--engine-pid", "999999999"])
    err = capsys.readouterr().err
    assert code != 0 and "--engine-pid 999999999: no such process on this host" in err
    assert not (tmp_path / "run").exists()                  # refused before anything was written
