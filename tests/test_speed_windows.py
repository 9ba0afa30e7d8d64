"""The speed-windows table prices every decode forward of an instance by its calibration traces' forwards of
the same batch size and shows, window by window inside each run, how far the instance's forwards moved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate.twin.diagnose.speed_windows import main, table
from foundation.errors import ServetwinError
from tests.helpers import VLLM_T0


def _run(out: Path, rel: str, start_s: float, end_s: float) -> None:
    p = out / rel / "run.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"run_window": {"start_unix": VLLM_T0 + start_s, "end_s": end_s}}))


def _decode(t: float, n: int, x: float) -> dict:
    """An SGLang decode forward of ``n`` requests of 2,000 tokens, ``x`` times the instance's speed
    (2 ms + 3 ms per request)."""
    s = x * (0.002 + 0.003 * n)
    return {"ev": "run", "t0": VLLM_T0 + t, "t1": VLLM_T0 + t + s, "mode": "DECODE",
            "reqs": [[f"r{i}", 2000] for i in range(n)]}


def _study(root: Path) -> Path:
    """An SGLang LPM instance: a 10-s calibration trace of 1- to 3-request forwards at its speed, then a 20-s
    run whose first 10 s run at that speed with 4-request forwards only (costlier, not slower: a size its
    calibration never saw) and whose last 10 s run 1.4 times slower."""
    out = root / "study-a"
    _run(out, "calibration/sglang-lpm/rate0.4-sigma0.9/seed-0", 0, 10)
    _run(out, "live/rate0.4-sigma0.9/sglang-lpm/seed-1", 20, 20)
    ev = [_decode(0.2 * k, 1 + k % 3, 1.0) for k in range(40)]
    ev += [_decode(20 + 0.2 * k, 4, 1.0) for k in range(40)]
    ev += [_decode(30 + 0.2 * k, 1 + k % 3, 1.4) for k in range(40)]
    ev += [{"ev": "run", "t0": VLLM_T0 + 31.1, "t1": VLLM_T0 + 31.3, "mode": "EXTEND", "reqs": [["p", 50, 0]]}]
    (out / "logs").mkdir()
    (out / "logs" / "sglang-lpm.steps.7").write_text("\n".join(json.dumps(e) for e in ev) + "\n")
    return out


def test_a_slow_stretch_inside_a_run_is_told_from_costlier_batches(tmp_path: Path):
    df = table(_study(tmp_path))
    assert list(df["what"]) == ["calibration", "run", "run"]
    run = df[df["what"] == "run"]
    assert list(run["window_s"]) == [0.0, 10.0] and list(run["forwards"]) == [40, 40]
    assert list(run["x_fit"]) == pytest.approx([1.0, 1.4], abs=1e-4)
    assert df.iloc[0]["x_fit"] == pytest.approx(1.0, abs=1e-4)


def test_windows_of_other_widths_and_bad_input(tmp_path: Path, capsys):
    out = _study(tmp_path)
    run = table(out, "sglang-lpm", width=20.0)
    assert list(run[run["what"] == "run"]["x_fit"]) == pytest.approx([1.2], abs=1e-4)   # both halves
    assert main([str(out), "--width", "5"]) == 0
    assert "| sglang-lpm | run | rate0.4-sigma0.9 | seed-1 | 15 |" in capsys.readouterr().out
    assert main([str(out), "--width", "0"]) == 2
    assert "--width 0.0: a window is a positive number of seconds" in capsys.readouterr().out
    with pytest.raises(ServetwinError, match="--config 'sglang': not a study configuration"):
        table(out, "sglang")
    with pytest.raises(ServetwinError, match="no step log and calibration traces of vllm-c512"):
        table(out, "vllm-c512")


def test_too_few_calibration_forwards_to_fit_the_line_is_one_clear_error(tmp_path: Path):
    out = _study(tmp_path)
    log = out / "logs" / "sglang-lpm.steps.7"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[30:]) + "\n")          # 10 calibration forwards left
    with pytest.raises(ServetwinError, match="calibration traces hold 10 decode forwards.*pricing needs 20"):
        table(out)
