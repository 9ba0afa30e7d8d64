"""The host-speed table times each run's small decode forwards from the engines' own step logs, in the order
each instance served its runs, against what its calibration traces measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate.twin.host_speed import main, report_part, summary, table
from foundation.errors import ServetwinError
from tests.helpers import VLLM_T0, vllm_line


def _run(out: Path, rel: str, start_s: float, end_s: float) -> None:
    p = out / rel / "run.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"run_window": {"start_unix": VLLM_T0 + start_s, "end_s": end_s}}))


def _study(root: Path) -> Path:
    """A vLLM 512 instance: a calibration trace at 0-10 s, study runs at 20-30 s (its forwards as fast) and
    40-50 s (three times slower), each timed on 1-3-request decode forwards; larger or prefilling forwards
    are not counted. An SGLang LPM instance with one calibration trace and one run at half its speed."""
    out = root / "study-a"
    _run(out, "calibration/vllm-c512/rate0.4-sigma0.9/seed-0", 0, 10)
    _run(out, "live/rate0.4-sigma0.9/vllm-c512/seed-1", 20, 10)
    _run(out, "live/rate0.4-sigma0.9/vllm-c512/seed-2", 40, 10)
    lines, i = [], 0
    for start, ms in ((0, 2.0), (20, 2.0), (40, 6.0)):
        for k in range(5):
            lines += [vllm_line(start + k, i, 0, 0, 1 + k % 3, ms),        # counted
                      vllm_line(start + k + 0.5, i + 1, 0, 0, 8, 50.0),    # a batch of 8: not counted
                      vllm_line(start + k + 0.7, i + 2, 1, 400, 1, 90.0)]  # a prefill: not counted
            i += 3
    (out / "logs").mkdir()
    (out / "logs" / "vllm-c512.steps").write_text("\n".join(lines) + "\n")
    _run(out, "calibration/sglang-lpm/rate0.4-sigma0.9/seed-0", 60, 10)
    _run(out, "live/rate0.4-sigma0.9/sglang-lpm/seed-1", 80, 10)
    ev = []
    for start, s in ((60, 0.010), (80, 0.020)):
        for k in range(4):
            t0 = VLLM_T0 + start + k
            ev += [{"ev": "run", "t0": t0, "t1": t0 + s, "mode": "DECODE", "reqs": [["a", 100], ["b", 90]]},
                   {"ev": "run", "t0": t0 + 0.5, "t1": t0 + 0.6, "mode": "EXTEND", "reqs": [["c", 50, 0]]}]
    (out / "logs" / "sglang-lpm.steps.77").write_text("\n".join(json.dumps(e) for e in ev) + "\n")
    return out


def test_each_run_is_timed_against_its_instances_calibration(tmp_path: Path):
    df = table(_study(tmp_path))
    assert list(df["config"]) == ["sglang-lpm", "sglang-lpm", "vllm-c512", "vllm-c512", "vllm-c512"]  # ORDER
    vllm = df[df["config"] == "vllm-c512"]
    assert list(vllm["what"]) == ["calibration", "run", "run"] and list(vllm["forwards"]) == [5, 5, 5]
    assert list(vllm["median_ms"]) == pytest.approx([2.0, 2.0, 6.0])
    assert list(vllm["x_calibration"]) == pytest.approx([1.0, 1.0, 3.0])
    assert list(vllm["start_min"]) == pytest.approx([0.0, 20 / 60, 40 / 60])     # from the study's first run
    sglang = df[df["config"] == "sglang-lpm"]
    assert list(sglang["median_ms"]) == pytest.approx([10.0, 20.0])
    assert list(sglang["x_calibration"]) == pytest.approx([1.0, 2.0])
    assert list(sglang["cell"]) == ["rate0.4-sigma0.9"] * 2


def test_one_configuration_and_bad_folders(tmp_path: Path, capsys):
    out = _study(tmp_path)
    assert main([str(out), "--config", "vllm-c512"]) == 0
    assert "| vllm-c512 | run | rate0.4-sigma0.9 | seed-2 |" in capsys.readouterr().out
    with pytest.raises(ServetwinError, match="--config 'vllm': not a study configuration"):
        table(out, "vllm")
    with pytest.raises(ServetwinError, match="no recorded runs"):
        table(tmp_path / "empty")
    (out / "logs" / "vllm-c512.steps").unlink()
    with pytest.raises(ServetwinError, match="no step log of vllm-c512"):
        table(out, "vllm-c512")


def test_the_report_summarises_each_instance_and_names_the_first_run_that_moved(tmp_path: Path):
    out = _study(tmp_path)
    got = summary(table(out)).set_index("config")
    assert got.loc["vllm-c512", "runs_x"] == "1.00–3.00 (2.00)"
    assert got.loc["vllm-c512", "runs_moved"] == "1 of 2; first rate0.4-sigma0.9/seed-2 (×3.00)"
    assert got.loc["sglang-lpm", "runs_moved"] == "1 of 1; first rate0.4-sigma0.9/seed-1 (×2.00)"
    assert got.loc["vllm-c512", "calibration_ms"] == pytest.approx(2.0)
    part = "\n".join(report_part(out))
    assert part.startswith("## Each instance's speed through the study") and "| vllm-c512 |" in part
    assert report_part(tmp_path / "no-study") == []          # a study without step logs: no section
