"""The SGLang step log's forwards priced by a profile: what `calibrate.engine_steps` reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate.engine_steps import main, priced, read_forwards, shape, summary
from foundation.errors import ServetwinError
from simulator.cost_model import CostModel
from simulator.profiles import load_hardware, load_model


def _cost() -> CostModel:
    return CostModel(load_hardware("cpu-base"), load_model("tiny-llama"), "sglang", 1, 1 << 20, True)


def test_forwards_are_priced_for_the_batch_they_ran(tmp_path: Path):
    """Extends of 1 request as priced, of 4 at 1.25x the price; decodes as priced: the summary shows the
    extend ratio growing with the batch (fixed costs per request that the profile puts per step)."""
    cost = _cost()
    lines = [json.dumps({"ev": "recv", "t": 0.0, "rid": "a", "prompt": 2048})]
    t = 0.0
    for k, factor in ((1, 1.0), (4, 1.25), (1, 1.0), (4, 1.25)):
        ev = {"ev": "run", "mode": "EXTEND", "reqs": [[f"r{i}", 205, 1843] for i in range(k)]}
        dur = cost.step_time(shape(ev)) * factor
        lines.append(json.dumps({**ev, "t0": t, "t1": t + dur}))
        t += dur + 0.001
    dec = {"ev": "run", "mode": "DECODE", "reqs": [[f"r{i}", 2100] for i in range(8)]}
    lines.append(json.dumps({**dec, "t0": t, "t1": t + cost.step_time(shape(dec))}))
    lines.append(json.dumps({"ev": "proc", "t0": t, "t1": t + 0.001, "mode": "DECODE", "n": 8}))
    (tmp_path / "steps.123").write_text("\n".join(lines) + "\n")
    runs = read_forwards(tmp_path / "steps")
    assert [r["mode"] for r in runs] == ["EXTEND"] * 4 + ["DECODE"]
    s = summary(priced(runs, cost)).set_index(["mode", "requests"])["ratio"]
    assert s[("EXTEND", "(0, 1]")] == pytest.approx(1.0)
    assert s[("EXTEND", "(2, 4]")] == pytest.approx(1.25)
    assert s[("DECODE", "(4, 8]")] == pytest.approx(1.0)


def test_a_missing_or_garbled_step_log_is_one_clear_error(tmp_path: Path, capsys):
    with pytest.raises(ServetwinError, match="no step log"):
        read_forwards(tmp_path / "none")
    (tmp_path / "s.1").write_text('{"ev": "run"\n')
    assert main([str(tmp_path / "s"), "--hardware", "cpu-base"]) == 2
    assert "s.1:1: not a step-log line" in capsys.readouterr().out
