"""The twin's step log and `calibrate.twin.diagnose.step_timeline`: the simulator logs what it priced, in the engine's
step-log schema; a live run the twin reproduces shows no difference in any part of TTFT; a live run whose
first tokens reach the client 10 ms later shows exactly that in ``after`` and nothing elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.records import RunRecord, write_run
from calibrate.engine_steps import shape
from calibrate.step_log import live_window, path_latencies
from calibrate.twin.diagnose.step_timeline import main, paired, per_request, study_table
from calibrate.twin.live import scenario
from foundation.errors import ServetwinError
from live.sglang_steplog import read_events, with_processing
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.cost_model import CostModel
from simulator.profiles import load_hardware, load_model

OVER = {"schedule_policy": "lpm", "max_total_tokens": 65536}
START = 1.8e9


def _sim(seed: int = 1, log: list | None = None) -> RunRecord:
    trace = compile_trace(scenario_from_dict(scenario(0.5, 0.9, 20.0, seed)))
    return simulate(trace, "sglang-current", "cpu-base", "tiny-llama", OVER, context=8192, step_log=log)


def test_the_twins_step_log_is_what_it_priced():
    """Every logged forward, priced again from the log alone, is the step's duration (extends as (new,
    cached) per request, decodes as sequence lengths); the forwards do not overlap and take the replica's
    busy time; every served request's prompt ends in one logged extend."""
    log: list = []
    rec = _sim(log=log)
    cost = CostModel(load_hardware("cpu-base"), load_model("tiny-llama"), "sglang", 1, 1 << 20, True)
    extends = [e for e in log if e["mode"] == "EXTEND"]
    assert extends and {e["mode"] for e in log} == {"EXTEND", "DECODE"}
    assert all(len(r) == 2 for e in log if e["mode"] == "DECODE" for r in e["reqs"])
    for e in log:
        assert cost.step_time(shape(e)) == pytest.approx(e["t1"] - e["t0"], rel=1e-9)
    assert all(a["t1"] <= b["t0"] for a, b in zip(log, log[1:], strict=False))
    assert sum(e["t1"] - e["t0"] for e in log) == pytest.approx(rec.meta["busy_s"])
    prompt = dict(zip(rec.requests["request_id"], rec.requests["prompt_tokens"], strict=True))
    ends = {r[0] for e in extends for r in e["reqs"] if r[1] + r[2] == prompt[r[0]]}
    assert ends == set(rec.requests.loc[rec.requests["ok"], "request_id"])
    again: list = []
    _sim(log=again)
    assert json.dumps(again) == json.dumps(log)                  # deterministic


def _as_live(rec: RunRecord, log: list, root: Path, delay_s: float = 0.0) -> Path:
    """Write a simulated run as a study's live SGLang run (first tokens ``delay_s`` later at the client)
    with its step log on the wall clock, and the profile it ran with."""
    run = root / "live" / "rate0.5-sigma0.9" / "sglang-lpm" / "seed-1"
    rec.requests["first_token_s"] += delay_s
    rec.meta.update({"source": "live", "engine": "sglang-lpm"})
    rec.meta["run_window"]["start_unix"] = START
    write_run(rec, run)
    sent = rec.requests.dropna(subset=["send_s"]).sort_values("send_s")
    lines = [{"ev": "recv", "t": START + s, "rid": f"rid-{i}", "prompt": 2048}
             for i, s in zip(sent["request_id"], sent["send_s"], strict=True)]
    lines += [{**e, "t0": START + e["t0"], "t1": START + e["t1"],
               "reqs": [[f"rid-{r[0]}", *r[1:]] for r in e["reqs"]]} for e in log]
    lines += [{"ev": "proc", "t0": START + e["t1"], "t1": START + e["t1"] + 1e-4, "mode": e["mode"],
               "n": len(e["reqs"])} for e in log]
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "sglang-lpm.steps.4242").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (root / "profiles" / "engine-pooled").mkdir(parents=True)
    for dest in (root / "profiles" / "sglang-lpm.yaml", root / "profiles" / "engine-pooled" / "sglang-lpm.yaml"):
        dest.write_text(Path(load_hardware("cpu-base").path).read_text())
    return run


def test_a_run_the_twin_reproduces_differs_in_no_part(tmp_path: Path, capsys):
    log: list = []
    _as_live(_sim(log=log), log, tmp_path)
    row = study_table(tmp_path, None, None, "tiny-llama").iloc[0]
    assert row["ttft_live_ms"] == pytest.approx(row["ttft_twin_ms"])
    for part in ("wait", "prefill", "after"):
        assert row[f"{part}_diff_ms"] == pytest.approx(0.0, abs=1e-3)
    assert row["extend_x"] == pytest.approx(1.0) and row["decode_x"] == pytest.approx(1.0)   # its own forwards
    assert main(["--study", str(tmp_path)]) == 0
    assert "| rate0.5-sigma0.9 | sglang-lpm | 1 |" in capsys.readouterr().out


def test_a_study_prices_its_forwards_by_the_held_out_twins_profile(tmp_path: Path, capsys):
    """By default the engine-pooled profile (the study's held-out twin), with --calibration instance the
    instance's own; a study whose report wrote neither is one clear error."""
    log: list = []
    _as_live(_sim(log=log), log, tmp_path)
    pooled = tmp_path / "profiles" / "engine-pooled" / "sglang-lpm.yaml"
    doc = yaml.safe_load(pooled.read_text())
    doc["cost"]["overheads"]["sglang"]["decode_scale"] = {"value": 2.0, "basis": "measured", "source": "x: over 9 gaps"}
    pooled.write_text(yaml.safe_dump(doc))
    assert study_table(tmp_path, None, None, "tiny-llama").iloc[0]["decode_x"] == pytest.approx(0.5)
    own = study_table(tmp_path, None, None, "tiny-llama", "instance").iloc[0]
    assert own["decode_x"] == pytest.approx(1.0) and own["extend_x"] == pytest.approx(1.0)
    pooled.unlink()
    assert main(["--study", str(tmp_path)]) == 2
    assert "engine-pooled/sglang-lpm.yaml: not found" in capsys.readouterr().out
    with pytest.raises(ServetwinError, match="calibration 'both' unknown; accepted: engine, instance"):
        study_table(tmp_path, None, None, "tiny-llama", "both")


def test_first_tokens_delivered_later_show_in_after_only(tmp_path: Path, capsys):
    log: list = []
    run = _as_live(_sim(log=log), log, tmp_path, delay_s=0.010)
    assert main([str(run), "--steps", str(tmp_path / "logs" / "sglang-lpm.steps"),
                 "--hardware", str(tmp_path / "profiles" / "sglang-lpm.yaml")]) == 0
    out = capsys.readouterr().out
    assert "| all |" in out and "EXTEND" in out
    row = study_table(tmp_path, "sglang-lpm", "rate0.5-sigma0.9", "tiny-llama").iloc[0]
    assert row["after_diff_ms"] == pytest.approx(10.0, abs=1e-3)
    for part in ("wait", "prefill"):
        assert row[f"{part}_diff_ms"] == pytest.approx(0.0, abs=1e-3)


def test_a_step_log_of_another_instance_is_refused(tmp_path: Path, capsys):
    log: list = []
    rec = _sim(log=log)
    run = _as_live(rec, log, tmp_path)
    from analysis.records import read_run
    live = read_run(run)
    extra = [{"ev": "recv", "t": START + 1.0, "rid": "stranger", "prompt": 2048}]
    with pytest.raises(ServetwinError, match="received .* requests in the run's window"):
        live_window(extra + [{"ev": "recv", "t": START + 2.0, "rid": "x", "prompt": 1}], live)
    (tmp_path / "logs" / "sglang-lpm.steps.4242").write_text(
        json.dumps({"ev": "run", "t0": 1.0, "t1": 1.1, "mode": "EXTEND", "reqs": [["a", 205, 1843]]}) + "\n" +
        json.dumps({"ev": "proc", "t0": 1.2, "t1": 1.21, "mode": "DECODE", "n": 1}) + "\n")
    assert main([str(run), "--steps", str(tmp_path / "logs" / "sglang-lpm.steps"), "--hardware", "cpu-base"]) == 2
    assert "is it this instance's log?" in capsys.readouterr().out
    with pytest.raises(ServetwinError, match="do not pair"):
        with_processing(read_events(tmp_path / "logs" / "sglang-lpm.steps"))
    with pytest.raises(ServetwinError, match="no SGLang runs of vllm-c512"):
        study_table(tmp_path, "vllm-c512", None, "tiny-llama")


def test_parts_are_paired_by_request():
    """Two requests: the live one waited 20 ms longer for its first forward, the other got its first token
    30 ms later; the medians of the differences say so per role."""
    reqs = pd.DataFrame({"request_id": [0, 1], "role": ["planner", "worker"], "send_s": [0.0, 0.5],
                         "first_token_s": [0.25, 0.80], "prompt_tokens": [2048, 2048]})
    twin_runs = [{"mode": "EXTEND", "t0": 0.01, "t1": 0.10, "reqs": [[0, 205, 1843]]},
                 {"mode": "DECODE", "t0": 0.10, "t1": 0.25, "reqs": [[0, 2049]]},
                 {"mode": "EXTEND", "t0": 0.51, "t1": 0.60, "reqs": [[1, 205, 1843]]},
                 {"mode": "DECODE", "t0": 0.60, "t1": 0.77, "reqs": [[1, 2049]]}]
    live_runs = [{**e, "t0": e["t0"] + 0.02, "t1": e["t1"] + 0.02} if i == 0 else e for i, e in enumerate(twin_runs)]
    live_req = reqs.assign(first_token_s=[0.25, 0.83])
    t = paired(per_request(live_runs, live_req), per_request(twin_runs, reqs)).set_index("role")
    assert t.loc["planner", "wait_diff_ms"] == pytest.approx(20.0)
    assert t.loc["planner", "after_diff_ms"] == pytest.approx(-20.0)
    assert t.loc["worker", "after_diff_ms"] == pytest.approx(30.0)
    assert t.loc["worker", "prefill_live_ms"] == pytest.approx(90.0)
    assert t.loc["all", "requests"] == 2 and t.loc["all", "next_extend_live"] == 0.0


def test_the_front_end_and_output_path_latencies_from_the_step_log():
    """Request 0 finds the scheduler idle (received 4 ms after it was sent: the front end); request 1 is
    sent while a forward runs (its wait is not the front end's). Request 0's prefill results are processed
    after the next forward and its first token reaches the client 6 ms later (the output path)."""
    reqs = pd.DataFrame({"request_id": [0, 1], "role": ["planner", "planner"], "send_s": [0.0, 0.05],
                         "first_token_s": [0.118, 0.31], "prompt_tokens": [2048, 2048]})
    runs = [{"mode": "EXTEND", "t0": 0.005, "t1": 0.095, "p0": 0.110, "p1": 0.112, "reqs": [[0, 205, 1843]]},
            {"mode": "DECODE", "t0": 0.095, "t1": 0.110, "p0": 0.20, "p1": 0.201, "reqs": [[0, 2049]]},
            {"mode": "EXTEND", "t0": 0.112, "t1": 0.20, "p0": 0.30, "p1": 0.302, "reqs": [[1, 205, 1843]]}]
    lat = path_latencies(runs, {0: 0.004, 1: 0.111}, reqs)
    assert lat["inbound_n"] == 1 and lat["inbound_s"] == pytest.approx(0.004)
    assert lat["outbound_n"] == 2 and lat["outbound_s"] == pytest.approx((0.006 + 0.008) / 2)
