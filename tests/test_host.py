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


def test_this_machine_is_read():
    s = host.summary(host.sample(), host.sample(), 1.0)
    if Path("/proc/stat").is_file():
        assert s["cpu_steal_s"] is not None and s["cpu_steal_s"] >= 0
