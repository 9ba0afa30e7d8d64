"""live.vllm_steplog and calibrate.twin.diagnose.vllm_admission: vLLM's iteration log read back, and each request's TTFT
split into admission, its prefill forward and the output path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from analysis.records import RunRecord
from calibrate.twin.diagnose.vllm_admission import QUEUE_BINS, STREAM_BINS, binned, main, split_ttft, with_twin
from foundation.errors import ServetwinError
from live.local_engine import VllmCpu
from live.vllm_steplog import read_steps
from tests.helpers import VLLM_T0, vllm_line, vllm_step_log


def _steps(tmp_path: Path) -> Path:
    """Three prefill forwards (at 60, 170 and 230 ms into the run) and two decode steps between them."""
    path = tmp_path / "vllm.steps"
    path.write_text("\n".join([
        "INFO something else the stat logger said", vllm_line(0.060, 0, 1, 224, 0, 40.0),
        vllm_line(0.105, 1, 0, 0, 1, 4.0), vllm_line(0.110, 2, 0, 0, 1, 4.0), vllm_line(0.170, 3, 1, 224, 1, 40.0),
        vllm_line(0.230, 4, 1, 224, 2, 45.0)]) + "\n")
    return path


def _run() -> RunRecord:
    """Request 0 alone; 1 sent while 0 streams; 2 a millisecond after 1 (queued behind it); 3 answered with
    no logged prefill near its first token; 4 answered just after 1, from the same one-request forward,
    as far as times go (that forward is 1's; the one before began before 4 was sent)."""
    req = pd.DataFrame({"request_id": [0, 1, 2, 3, 4], "send_s": [0.0, 0.100, 0.101, 0.45, 0.15],
                        "first_token_s": [0.0615, 0.172, 0.2315, 0.5, 0.174],
                        "last_token_s": [0.2, 0.3, 0.35, 0.6, 0.31]})
    return RunRecord(meta={"run_window": {"start_unix": VLLM_T0}}, requests=req)


def test_the_step_log_is_read_and_each_ttft_split_into_its_parts(tmp_path: Path):
    steps = read_steps(_steps(tmp_path))
    assert list(steps["iteration"]) == [0, 1, 2, 3, 4] and steps["elapsed_s"].iloc[4] == pytest.approx(0.045)
    rows = split_ttft(_run(), steps).set_index("request_id")
    assert list(rows.index) == [0, 1, 2]          # 3: no prefill logged near its token; 4: none with room
    assert list(rows["streams"]) == [0, 1, 1] and list(rows["queued_ahead"]) == [0, 0, 1]
    assert rows["admission_s"].tolist() == pytest.approx([0.020, 0.030, 0.084], abs=1e-6)
    assert rows["prefill_s"].tolist() == pytest.approx([0.040, 0.040, 0.045])
    assert rows["output_s"].tolist() == pytest.approx([0.0015, 0.002, 0.0015], abs=1e-6)
    parts = rows["admission_s"] + rows["prefill_s"] + rows["output_s"]
    assert parts.tolist() == pytest.approx(rows["ttft_s"].tolist())
    by = binned(rows.reset_index(), "streams", STREAM_BINS).set_index("streams")
    assert by.loc["1", "requests"] == 2 and by.loc["1", "admission_ms"] == pytest.approx(57.0, abs=1e-3)
    q = binned(rows.reset_index(), "queued_ahead", QUEUE_BINS).set_index("queued_ahead")
    assert list(q.index) == ["0", "1"] and q.loc["1", "prefill_ms"] == pytest.approx(45.0)


def test_a_step_log_that_does_not_fit_the_run_is_refused(tmp_path: Path, capsys):
    with pytest.raises(ServetwinError, match="no vLLM step log"):
        read_steps(tmp_path / "missing.steps")
    (tmp_path / "plain.log").write_text("INFO 12-01 21:15:12 [api_utils.py:286] non-default args: {}\n")
    with pytest.raises(ServetwinError, match="enable-logging-iteration-details"):
        read_steps(tmp_path / "plain.log")
    later = _run()
    later.meta["run_window"]["start_unix"] = VLLM_T0 + 3600.0        # another instance's hour
    with pytest.raises(ServetwinError, match="no first token within 100 ms"):
        split_ttft(later, read_steps(_steps(tmp_path)))
    with pytest.raises(SystemExit):                              # each run needs its own --steps
        main(["run-a", "run-b", "--steps", str(_steps(tmp_path))])
    assert "give each run the step log" in capsys.readouterr().err


def test_a_vllm_instance_with_a_step_log_logs_every_iteration_to_it(tmp_path: Path):
    eng = VllmCpu(Path("model"), port=8123, log_path=tmp_path / "vllm.log", step_log=tmp_path / "vllm.steps")
    assert "--enable-logging-iteration-details" in eng.argv()
    cfg = json.loads(Path(eng.env()["VLLM_LOGGING_CONFIG_PATH"]).read_text())
    assert cfg["handlers"]["steps"]["filename"] == str((tmp_path / "vllm.steps").resolve())
    assert cfg["loggers"]["vllm.v1.metrics.loggers"]["handlers"] == ["steps"]
    assert "%(created)" in cfg["formatters"]["steps"]["format"]       # Unix times, not whole seconds
    plain = VllmCpu(Path("model"), port=8123, log_path=tmp_path / "vllm.log")
    assert "--enable-logging-iteration-details" not in plain.argv()
    assert plain.env().get("VLLM_LOGGING_CONFIG_PATH") == os.environ.get("VLLM_LOGGING_CONFIG_PATH")


def test_a_simulated_run_read_through_its_own_step_log_splits_as_its_twin(tmp_path: Path):
    """A simulated vLLM run whose step log is written out as vLLM logs its iterations: every request is
    matched, and the live-side split equals the twin's own split of the same requests (the twin of a
    simulation with the same profile is itself)."""
    from calibrate.twin.study import scenario
    from scenarios import compile_trace, scenario_from_dict
    from simulator import simulate
    trace = compile_trace(scenario_from_dict(scenario(0.5, 0.9, 20.0, 1)))
    log: list[dict] = []
    rec = simulate(trace, "vllm-v1", "cpu-base", "tiny-llama", {"block_size": 32}, context=8192, step_log=log)
    rec.meta["run_window"]["start_unix"] = VLLM_T0
    (tmp_path / "sim.steps").write_text(vllm_step_log(log))
    both = with_twin(rec, read_steps(tmp_path / "sim.steps"), "cpu-base", "tiny-llama")
    assert len(both) == len(rec.requests.dropna(subset=["first_token_s"]))
    for part in ("admission", "prefill", "output", "ttft"):
        assert (both[f"{part}_s"] - both[f"twin_{part}_s"]).abs().max() < 2e-5      # µs stamps, 10-µs elapsed
    assert (both["twin_output_s"].abs() < 1e-12).all()          # the profile gives vLLM no output latency
    assert (both["twin_admission_s"] >= 0.0).all()
