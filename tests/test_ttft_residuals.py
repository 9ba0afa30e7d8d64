"""calibrate.twin.diagnose.ttft_residuals: a run against itself has no residual; a "live" run whose engine has a 10 ms
front end the twin lacks shows 10 ms in every concurrency bin; runs of different traces are refused."""

from __future__ import annotations

import dataclasses

import pytest

from calibrate.twin.diagnose.ttft_residuals import by_concurrency, main, residuals
from calibrate.twin.study import scenario
from foundation.errors import ServetwinError
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.profiles import load_hardware


def _runs(tmp_path):
    hw = load_hardware("cpu-base")
    slow = dataclasses.replace(hw, overheads={**hw.overheads, "vllm-v1": dataclasses.replace(
        hw.overhead("vllm-v1"), request_s=0.01)})
    trace = compile_trace(scenario_from_dict(scenario(0.5, 0.9, 30.0, 1)))
    twin = simulate(trace, "vllm-v1", hw, "tiny-llama", {"block_size": 32}, context=8192)
    live = simulate(trace, "vllm-v1", slow, "tiny-llama", {"block_size": 32}, context=8192)
    return twin, live


def test_residuals_by_concurrency(tmp_path):
    twin, live = _runs(tmp_path)
    same = by_concurrency([residuals(twin, twin)])
    assert (same["median_residual_ms"].abs() < 1e-9).all() and same["requests"].sum() == len(twin.requests)
    late = by_concurrency([residuals(live, twin)])
    assert len(late) >= 2                                       # lone requests and requests among others
    assert late["median_residual_ms"].iloc[0] == pytest.approx(10.0, abs=0.5)   # in flight: none
    other = simulate(compile_trace(scenario_from_dict(scenario(0.5, 0.9, 30.0, 2))), "vllm-v1", "cpu-base",
                     "tiny-llama", {"block_size": 32}, context=8192)
    with pytest.raises(ServetwinError, match="trace digests differ"):
        residuals(live, other)


def test_cli_prints_the_table_and_refuses_unpaired_runs(tmp_path, capsys):
    from analysis.records import write_run
    twin, live = _runs(tmp_path)
    write_run(twin, tmp_path / "sim")
    write_run(live, tmp_path / "live")
    assert main([str(tmp_path / "live"), str(tmp_path / "sim")]) == 0
    out = capsys.readouterr().out
    assert "median_residual_ms" in out and any(line.startswith("| 0 |") for line in out.splitlines())
    with pytest.raises(SystemExit, match="pairs"):
        main([str(tmp_path / "live")])
