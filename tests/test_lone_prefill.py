"""vLLM's prefill scale from the requests a run served alone (it writes no step log): exact against a run
whose prefill steps are 1.25x the profile's, 1 against its own twin, refused with too few lone requests,
and written to the vLLM family of the instance's profile by the twin study."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from analysis.records import RunRecord, write_run
from calibrate.lone_prefill import MIN_LONE, lone_prefill_scale, served_alone
from calibrate.step_log import write_measured
from calibrate.twin.live import calibration_dir, scenario
from calibrate.twin.steplog import run_prefill_scale, with_prefill_scale
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.profiles import HardwareProfile, load_hardware

FRONT_END = 0.005
VLLM = {"enable_chunked_prefill": False, "block_size": 32}


def _hw(**ovh: float) -> HardwareProfile:
    hw = load_hardware("cpu-base")
    one = dataclasses.replace(hw.overhead("vllm-v1"), request_s=FRONT_END, **ovh)
    return dataclasses.replace(hw, overheads={**hw.overheads, "vllm-v1": one})


def _run(hw: HardwareProfile) -> RunRecord:
    trace = compile_trace(scenario_from_dict(scenario(0.2, 0.9, 60.0, 0)))
    return simulate(trace, "vllm-v1", hw, "tiny-llama", VLLM, context=8192)


def test_requests_served_alone_had_the_engine_to_themselves():
    run = _run(_hw())
    alone = served_alone(run, run)
    req = run.requests.set_index("request_id")
    assert len(alone) >= MIN_LONE
    for rid in alone.index:
        me = req.loc[rid]
        others = req.drop(rid)
        assert not ((others["send_s"] < me["send_s"]) & (others["last_token_s"] > me["send_s"])).any()
        assert not ((others["send_s"] > me["send_s"]) & (others["send_s"] < me["first_token_s"])).any()
    assert len(alone) < len(req)                     # the workers of a fan-out are sent together


def test_the_scale_is_the_prefill_steps_share_of_a_lone_ttft():
    plain, slow = _run(_hw()), _run(_hw(prefill_scale=1.25))
    found = lone_prefill_scale(slow, plain, FRONT_END)
    assert found is not None and found[0] == pytest.approx(1.25, rel=1e-3) and found[1] >= MIN_LONE
    itself = lone_prefill_scale(plain, plain, FRONT_END)
    assert itself is not None and itself[0] == 1.0
    first = RunRecord(meta=plain.meta, requests=plain.requests.sort_values("send_s").head(MIN_LONE - 1))
    assert lone_prefill_scale(first, plain, FRONT_END) is None                          # too few


def test_the_study_writes_a_vllm_instances_scale_to_its_family(tmp_path: Path):
    live = _run(_hw(prefill_scale=1.25))
    live.meta.update({"source": "live", "engine": "vllm-nochunk", "request_timeout_s": 300.0})
    cal = calibration_dir(tmp_path, "vllm-nochunk", "rate0.5-sigma0.9")
    write_run(live, cal)
    base = write_measured(load_hardware("cpu-base").path, tmp_path / "fit.yaml", "vllm-v1",
                          {"request_s": (FRONT_END, "the live run's front end")})
    assert with_prefill_scale(base, None, "x") == base
    found = run_prefill_scale(tmp_path, "vllm-nochunk", cal, base)
    assert found is not None and found.family == "vllm-v1" and "served alone" in found.basis
    prof = load_hardware(str(with_prefill_scale(base, found, "calibration", tmp_path / "p.yaml")))
    assert prof.overhead("vllm-v1").prefill_scale == pytest.approx(found.scale)
    assert prof.overhead("sglang").prefill_scale == 1.0
    assert found.scale == pytest.approx(1.25, rel=1e-3)
