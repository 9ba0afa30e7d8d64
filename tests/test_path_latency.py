"""The engine's latencies outside its forwards: the output path's delay in the simulator (every token and
every dependant waits for it), the probe fit charging both latencies to a window instead of its steps,
and the twin study measuring them from an SGLang instance's step log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from analysis.records import read_run, write_run
from calibrate.fit import PROFILE_HEAD, Window, fit_steps, predict_time, with_params
from calibrate.step_log import measured_latencies
from calibrate.twin.live import calibration_dir, scenario
from calibrate.twin.steplog import fit_base, with_own_latencies
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import HardwareProfile, load_hardware, load_model
from tests.helpers import assert_dependants_sent_when_ready

START = 1.8e9


def _with(hw: HardwareProfile, family: str, **ovh: float) -> HardwareProfile:
    return dataclasses.replace(hw, overheads={**hw.overheads, family: dataclasses.replace(hw.overhead(family), **ovh)})


def test_tokens_and_dependants_wait_for_the_output_path(small_trace):
    """With a 20 ms output path every dependant is still sent when its predecessors' last tokens reach the
    client (plus its tool delay) — 20 ms later than the engine produced them; the run's first request,
    alone in an idle engine, gets its first token exactly 20 ms later."""
    hw = load_hardware("l4")
    base = simulate(small_trace, "sglang-0.4.1", hw)
    slow = simulate(small_trace, "sglang-0.4.1", _with(hw, "sglang", deliver_s=0.02), check_every=1)
    r = slow.requests.set_index("request_id")
    assert r["ok"].all()
    assert_dependants_sent_when_ready(small_trace, r)
    first = int(base.requests["send_s"].idxmin())
    b, s = base.requests.loc[first], slow.requests.loc[first]
    assert s["first_token_s"] - s["send_s"] == pytest.approx(b["first_token_s"] - b["send_s"] + 0.02, abs=1e-9)
    assert slow.requests["last_token_s"].max() > base.requests["last_token_s"].max()


def test_a_windows_latencies_are_not_charged_to_its_steps():
    """Prefill windows of an engine with a 4 ms front end and a 5 ms output path: fitted with both latencies
    known, the fixed prefill-step cost comes out as the engine's (8 ms); fitted without them, 9 ms higher."""
    hw, mp = load_hardware("cpu-base"), load_model("tiny-llama")
    true = with_params(_with(hw, "sglang", request_s=0.004, deliver_s=0.005), "sglang", {"step_eager_s": 0.008})
    cm = CostModel(true, mp, "sglang", 1, 1 << 20, True)
    windows = []
    for n in (64, 256, 1024, 2048, 4096):
        b = BatchShape()
        b.add_prefill(n, 0, True)
        windows.append(Window([(1.0, b)]))
    assert predict_time(cm, windows[0]) == pytest.approx(0.009 + cm.step_time(windows[0].steps[0][1]))
    y = [predict_time(cm, w) for w in windows]
    free = ("eta_compute", "step_eager_s")
    known = fit_steps(_with(hw, "sglang", request_s=0.004, deliver_s=0.005), mp, "sglang", windows, y, free,
                      extend_full_attention=True)
    blind = fit_steps(hw, mp, "sglang", windows, y, free, extend_full_attention=True)
    assert known.params["step_eager_s"] == pytest.approx(0.008, abs=2e-4)
    assert blind.params["step_eager_s"] == pytest.approx(0.017, abs=5e-4)


def _engine_run(out: Path, inbound: float, outbound: float) -> Path:
    """A 'live' SGLang calibration run that is a simulation with a front end and an output path, with the
    step log its scheduler would have written: each request received ``inbound`` after it was sent when
    idle, each batch's results processed when the next forward ends (the inline overlap scheduler on a
    CPU) or at once when none follows."""
    hw = _with(load_hardware("cpu-base"), "sglang", request_s=inbound, deliver_s=outbound)
    trace = compile_trace(scenario_from_dict(scenario(0.5, 0.9, 30.0, 0)))
    log: list = []
    rec = simulate(trace, "sglang-current", hw, "tiny-llama", {"schedule_policy": "lpm", "max_total_tokens": 65536},
                   context=8192, step_log=log)
    rec.meta.update({"source": "live", "engine": "sglang-lpm"})
    rec.meta["run_window"]["start_unix"] = START
    cal = calibration_dir(out, "sglang-lpm", "rate0.5-sigma0.9")
    write_run(rec, cal)
    sent = rec.requests.sort_values("send_s")
    lines = [{"ev": "recv", "t": START + s + inbound, "rid": f"r{i}", "prompt": 2048}
             for i, s in zip(sent["request_id"], sent["send_s"], strict=True)]
    for k, e in enumerate(log):
        nxt = log[k + 1] if k + 1 < len(log) else None
        done = nxt["t1"] if nxt is not None and nxt["t0"] == e["t1"] else e["t1"]
        reqs = [[f"r{r[0]}", *r[1:]] for r in e["reqs"]]
        lines.append({**e, "t0": START + e["t0"], "t1": START + e["t1"], "reqs": reqs})
        lines.append({"ev": "proc", "t0": START + done, "t1": START + done, "mode": e["mode"], "n": len(e["reqs"])})
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "sglang-lpm.steps.7").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return cal


def test_the_study_measures_an_instances_latencies_from_its_step_log(tmp_path: Path):
    cal = _engine_run(tmp_path, inbound=0.004, outbound=0.006)
    lat = measured_latencies(cal, tmp_path / "logs" / "sglang-lpm.steps")
    assert lat["inbound_n"] >= 2 and lat["inbound_s"] == pytest.approx(0.004, abs=1e-5)
    assert lat["outbound_n"] == len(read_run(cal).requests) and lat["outbound_s"] == pytest.approx(0.006, abs=1e-5)
    base = load_hardware(fit_base(tmp_path, "sglang")).overhead("sglang")
    assert (base.request_s, base.deliver_s) == (pytest.approx(0.004, abs=1e-5), pytest.approx(0.006, abs=1e-5))
    assert fit_base(tmp_path, "vllm") == "cpu-base"
    prof = tmp_path / "profiles" / "sglang-lpm.yaml"
    prof.write_text(PROFILE_HEAD + Path(load_hardware("cpu-base").path).read_text())    # as the study wrote it
    assert load_hardware(str(with_own_latencies(tmp_path, "sglang-lpm", prof))).overhead("sglang").deliver_s == \
        pytest.approx(0.006, abs=1e-5)
    other = tmp_path / "profiles" / "vllm-c512.yaml"
    other.write_text(prof.read_text())
    assert with_own_latencies(tmp_path, "sglang-fcfs-c512", other) == other     # no step log: unchanged


def test_a_study_without_step_logs_fits_from_the_plain_base(tmp_path: Path):
    assert fit_base(tmp_path, "sglang") == "cpu-base"
    assert not (tmp_path / "profiles").exists()


def test_prefill_scale_multiplies_steps_with_prefill_only():
    hw = load_hardware("cpu-base")
    plain = CostModel(hw, load_model("tiny-llama"), "sglang", 1, 1 << 20, True)
    slow = CostModel(_with(hw, "sglang", prefill_scale=1.25), load_model("tiny-llama"), "sglang", 1, 1 << 20, True)
    pre, dec, mixed = BatchShape(), BatchShape(), BatchShape()
    pre.add_prefill(205, 1843, True)
    dec.add_decode(2048)
    mixed.add_prefill(64, 0, True)
    mixed.add_decode(2048)
    assert slow.step_time(pre) == pytest.approx(1.25 * plain.step_time(pre))
    assert slow.step_time(mixed) == pytest.approx(1.25 * plain.step_time(mixed))
    assert slow.step_time(dec) == pytest.approx(plain.step_time(dec))


def test_an_instances_prefill_scale_from_its_step_log(tmp_path: Path):
    """The 'live' run's forwards are the twin's own with the base profile: Σ measured / Σ priced is 1 against
    it, 1/1.25 against a profile that prices prefill 1.25x; too few extends measure nothing; the scale
    lands in the profile as measured."""
    from calibrate.engine_steps import MIN_EXTENDS, prefill_scale
    from calibrate.twin.steplog import PrefillScale, run_prefill_scale, with_prefill_scale
    cal = _engine_run(tmp_path, inbound=0.004, outbound=0.006)
    base = Path(load_hardware("cpu-base").path)
    found = run_prefill_scale(tmp_path, "sglang-lpm", cal, base)
    assert found is not None and found.scale == pytest.approx(1.0, abs=1e-6) and found.n >= MIN_EXTENDS
    assert (found.family, found.basis.startswith("step log")) == ("sglang", True)
    prof = with_prefill_scale(base, PrefillScale(1.25, 40, "sglang", "test"), "calibration", tmp_path / "p.yaml")
    assert load_hardware(str(prof)).overhead("sglang").prefill_scale == pytest.approx(1.25)
    again = run_prefill_scale(tmp_path, "sglang-lpm", cal, prof)
    assert again is not None and again.scale == pytest.approx(0.8, abs=1e-6)
    cost = CostModel(load_hardware("cpu-base"), load_model("tiny-llama"), "sglang", 1, 1 << 20, True)
    one = {"mode": "EXTEND", "t0": 0.0, "t1": 0.1, "reqs": [[0, 205, 1843]]}
    assert prefill_scale([one] * (MIN_EXTENDS - 1), cost) is None
    assert run_prefill_scale(tmp_path, "sglang-fcfs-c512", cal, base) is None        # no step log
    assert with_prefill_scale(base, None, "x") == base


def test_the_tracking_twin_carries_the_prefill_scale_of_the_run_before(tmp_path: Path):
    import pandas as pd

    from analysis.records import RunRecord
    from calibrate.twin.own_scale import RunScale, tracking
    from calibrate.twin.steplog import PrefillScale

    def run(name: str, start: float, prefill: float | None) -> RunScale:
        rec = RunRecord(meta={"run_window": {"start_s": 0.0, "start_unix": start}}, requests=pd.DataFrame())
        return RunScale(tmp_path / name, rec, tmp_path / "fit.yaml", None,
                        prefill=None if prefill is None else PrefillScale(prefill, 20, "sglang", "test"))
    got = tracking(run("calibration", 0.0, 1.02), [run("seed-2", 200.0, None), run("seed-1", 100.0, 1.3),
                                                   run("seed-3", 300.0, 1.1)])
    assert [r.path.name for r in got] == ["seed-1", "seed-2", "seed-3"]
    assert [r.prefill.scale for r in got if r.prefill] == [1.02, 1.3, 1.3]
    assert [r.prefill_source.name for r in got if r.prefill_source] == ["calibration", "seed-1", "seed-1"]
