"""The front end as one event loop (simulator.front_end): requests taken in one after another, behind the
tokens the loop streams; in the simulator, a request sent while others stream reaches the scheduler later
than one sent to an idle engine, and a step's tokens reach the client in turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.fit import with_params
from simulator import simulate
from simulator.front_end import FrontEnd
from simulator.profiles import load_hardware
from tests.helpers import VLLM_T0, assert_dependants_sent_when_ready, vllm_step_log


def test_requests_are_taken_in_one_after_another_behind_the_loops_output_work():
    fe = FrontEnd(request_s=0.010, step_s=0.002, chunk_s=0.0005)
    a, b = fe.take_in(1.0), fe.take_in(1.0)
    assert (a.done_at, b.done_at) == pytest.approx((1.010, 1.020))       # the second waits for the first
    done = fe.stream(1.004)                         # a step's outputs while a is being taken in
    assert done == pytest.approx(1.006) and fe.written_at(done, 2) == pytest.approx(1.0075)
    assert (a.done_at, b.done_at) == pytest.approx((1.012, 1.022))       # both pushed by the loop's 2 ms
    assert fe.stream(1.005) == pytest.approx(1.008)                      # behind the first step's work
    c = fe.take_in(1.006)                           # behind b; the loop's queued work is before it
    assert c.done_at == pytest.approx(b.done_at + 0.010)
    fe.check_integrity()
    for intake in (a, b, c):
        fe.handed_over(intake)
    assert fe.take_in(2.0).done_at == pytest.approx(2.010)      # an idle loop: the request's own work only


def test_bad_front_end_parameters_are_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        FrontEnd(0.01, -0.001, 0.0)


def test_a_busy_front_end_delays_admissions_and_streams_tokens_in_turn(small_trace):
    """vLLM V1 with a 5 ms front end: as a latency, and as a loop that spends 2 ms on each step's outputs
    and whose streams reach the client 0.3 ms apart. The run's first request, alone, differs only by its own
    token's wait on the loop; overall TTFTs are longer with the loop, every dependant is still sent when its
    predecessors' last tokens reach the client, and the run repeats exactly."""
    hw = load_hardware("l4")
    lat = with_params(hw, "vllm-v1", {"request_s": 0.005})
    loop = with_params(hw, "vllm-v1", {"request_s": 0.005, "front_end_step_s": 0.002, "stream_chunk_s": 0.0003})
    base = simulate(small_trace, "vllm-v1", lat).requests.set_index("request_id")
    busy = simulate(small_trace, "vllm-v1", loop, check_every=1).requests.set_index("request_id")
    assert busy["ok"].all()
    assert_dependants_sent_when_ready(small_trace, busy)
    first = int(base["send_s"].idxmin())
    ttft = lambda r: r["first_token_s"] - r["send_s"]  # noqa: E731
    assert ttft(busy.loc[first]) == pytest.approx(ttft(base.loc[first]) + 0.0023, abs=1e-9)
    assert ttft(busy).median() > ttft(base).median()
    again = simulate(small_trace, "vllm-v1", loop).requests.set_index("request_id")
    assert busy.equals(again)


def _instance_run(tmp_path, step_s: float, chunk_s: float, seconds: float = 30.0):  # type: ignore[no-untyped-def]
    """A 'live' vLLM run that is a simulation with a 6 ms front end whose loop takes ``step_s`` on each
    step's outputs and streams them ``chunk_s`` apart, and its step log as vLLM writes it (each line when
    the loop is done with the step); and the profile without the loop."""
    from calibrate.step_log import write_measured
    from calibrate.twin.live import scenario
    from live.vllm_steplog import read_steps
    from scenarios import compile_trace, scenario_from_dict
    profile = write_measured(load_hardware("cpu-base").path, tmp_path / "p.yaml", "vllm-v1",
                             {"request_s": (0.006, "test")})
    trace = compile_trace(scenario_from_dict(scenario(0.66, 0.9, seconds, 0)))
    log: list = []
    hw = with_params(load_hardware(str(profile)), "vllm-v1", {"front_end_step_s": step_s, "stream_chunk_s": chunk_s})
    rec = simulate(trace, "vllm-v1", hw, "tiny-llama", {"block_size": 32}, context=8192, step_log=log)
    rec.meta["run_window"]["start_unix"] = VLLM_T0
    (tmp_path / "i.steps").write_text(vllm_step_log(log, lag_s=step_s))
    return rec, read_steps(tmp_path / "i.steps"), str(profile)


def test_the_loop_is_recovered_from_an_instances_step_log(tmp_path):
    """An instance whose front-end loop spends 1.5 ms on each step and streams 0.4 ms apart: fitted from its
    run and step log against the profile without the loop, the spacing comes back from the output path and
    the time per step within the grid's 0.1 ms, the time its busy requests lost to missed forwards matching;
    an instance without a loop gets none."""
    from calibrate.vllm_front_end import fit_loop
    rec, steps, profile = _instance_run(tmp_path, 0.0015, 0.0004)
    fit = fit_loop([(rec, steps)], profile)
    assert fit is not None and fit.busy >= 10 and fit.idle >= 10
    assert fit.chunk_s == pytest.approx(0.0004, abs=2e-5)
    assert fit.step_s == pytest.approx(0.0015, abs=1.01e-4)
    assert fit.live_lost_s > 0 and fit.twin_lost_s == pytest.approx(fit.live_lost_s, abs=5e-4)
    (tmp_path / "plain").mkdir()
    plain, plain_steps, _ = _instance_run(tmp_path / "plain", 0.0, 0.0)
    none = fit_loop([(plain, plain_steps)], profile)
    assert none is not None and none.step_s <= 1e-4 and none.chunk_s < 2e-5


def test_the_time_a_request_lost_is_the_forwards_it_missed_after_the_front_ends_latency():
    """Forwards start at 0, 10, 20 and 30 ms; the front end takes 4 ms. A request sent at 1 ms could join the
    forward at 10: joined there it lost nothing, joined at 20 it lost 10 ms; one sent at 8 ms could only
    join the forward at 20; one that joined earlier than the rule says lost nothing (a forward starting within
    ``SLACK_S`` before the earliest arrival counts as joinable: log stamps and rounding)."""
    import numpy as np

    from calibrate.vllm_front_end import lost
    starts = np.array([0.030, 0.0, 0.010, 0.020])
    got = lost(np.array([0.001, 0.001, 0.008, 0.008]), np.array([0.010, 0.020, 0.020, 0.010]), starts, 0.004)
    assert got.tolist() == pytest.approx([0.0, 0.010, 0.0, 0.0])


def _add_instance(out: Path, label: str, rec, steps: Path) -> None:  # type: ignore[no-untyped-def]
    """``rec`` as ``label``'s calibration trace in the study folder ``out``, its step log beside it."""
    import shutil

    from analysis.records import write_run
    from calibrate.twin.live import calibration_dir
    rec.meta.update({"source": "live", "engine": label})
    write_run(rec, calibration_dir(out, label, "rate0.66-sigma0.9"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    shutil.copy(steps, out / "logs" / f"{label}.steps")


def _assert_loop(base: Path, out: Path, label: str) -> None:
    """``base`` is ``label``'s front-end profile and carries the loop the 1.5 ms / 0.4 ms run measured."""
    assert base == out / "profiles" / "front-end" / f"{label}.yaml"
    ovh = load_hardware(str(base)).overhead("vllm-v1")
    assert ovh.front_end_step_s == pytest.approx(0.0015, abs=1.01e-4)
    assert ovh.stream_chunk_s == pytest.approx(0.0004, abs=2e-5)


def test_a_study_puts_a_vllm_instances_measured_loop_in_its_base_profile(tmp_path):
    """A study folder whose vLLM 512 instance served one calibration trace with a step log: its base profile
    (OUT/profiles/front-end) carries the loop its trace measured; an instance without a step log keeps its
    family's profile."""
    from analysis.records import write_run
    from calibrate.twin.live import calibration_dir
    from calibrate.twin.steplog import with_front_end
    rec, _, profile = _instance_run(tmp_path, 0.0015, 0.0004)
    out = tmp_path / "study"
    _add_instance(out, "vllm-c512", rec, tmp_path / "i.steps")
    _assert_loop(with_front_end(out, "vllm-c512", Path(profile)), out, "vllm-c512")
    write_run(rec, calibration_dir(out, "vllm-nochunk", "rate0.66-sigma0.9"))
    assert with_front_end(out, "vllm-nochunk", Path(profile)) == Path(profile)      # no step log


def test_an_instance_whose_traces_are_too_few_to_fit_takes_the_other_vllm_instances_loop(tmp_path):
    """Both vLLM instances logged their steps; vLLM unchunked's calibration trace is too short to fit a loop
    (fewer than 10 requests reached an idle engine): its base profile carries the loop vLLM 512's trace
    measured, and says where it came from. Alone, it keeps its family's profile."""
    import yaml

    from calibrate.twin.steplog import with_front_end
    from calibrate.vllm_front_end import fit_loop
    out = tmp_path / "study"
    (tmp_path / "short").mkdir()
    short, short_steps, profile = _instance_run(tmp_path / "short", 0.0, 0.0, seconds=10.0)
    assert fit_loop([(short, short_steps)], profile) is None
    _add_instance(out, "vllm-nochunk", short, tmp_path / "short" / "i.steps")
    assert with_front_end(out, "vllm-nochunk", Path(profile)) == Path(profile)     # no other instance yet
    rec, _, _ = _instance_run(tmp_path, 0.0015, 0.0004)
    _add_instance(out, "vllm-c512", rec, tmp_path / "i.steps")
    base = with_front_end(out, "vllm-nochunk", Path(profile))
    _assert_loop(base, out, "vllm-nochunk")
    source = yaml.safe_load(base.read_text())["cost"]["overheads"]["vllm-v1"]["front_end_step_s"]["source"]
    assert source.startswith("calibration/vllm-c512: step log")
    assert "vllm-nochunk's own calibration traces had too few" in source


def test_the_front_end_tool_prints_the_loop_and_refuses_a_missing_step_log(tmp_path, capsys):
    from analysis.records import write_run
    from calibrate.vllm_front_end import main
    rec, _, profile = _instance_run(tmp_path, 0.0015, 0.0004)
    write_run(rec, tmp_path / "run")
    assert main([str(tmp_path / "run"), "--steps", str(tmp_path / "i.steps"), "--profile", profile]) == 0
    assert capsys.readouterr().out.startswith("front_end_step_s 1.50 ms, stream_chunk_s 0.40 ms")
    assert main([str(tmp_path / "run"), "--steps", str(tmp_path / "none.steps"), "--profile", profile]) != 0
    assert "no vLLM step log" in capsys.readouterr().err
