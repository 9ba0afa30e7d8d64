"""The scale-drift diagnostic judges every predictor of an instance's scales on the same runs, taken in the
order the instance served them (not the order of their folders)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from calibrate.twin.diagnose.scale_drift import ENGINE_POOLED, by_instance, errors, main, summary


def _profile(path: Path, decode: tuple[float, int], prefill: tuple[float, int] | None = None) -> None:
    ovh = {"decode_scale": {"value": decode[0], "basis": "measured", "source": f"x: over {decode[1]} gaps"}}
    if prefill is not None:
        ovh["prefill_scale"] = {"value": prefill[0], "basis": "measured", "source": f"x: Σ over {prefill[1]}"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"cost": {"overheads": {"sglang": ovh}}}))


def _study(root: Path) -> Path:
    out = root / "study-a"
    _profile(out / "profiles" / "sglang-lpm.yaml", (1.2, 100), (1.1, 10))
    # served in the order seed-3, seed-1, seed-2 (start times), whatever their names
    for seed, start, decode in (("seed-1", 200.0, (1.1, 300)), ("seed-2", 300.0, (1.3, 300)),
                                ("seed-3", 100.0, (1.0, 200))):
        _profile(out / "profiles" / "own-scale" / "rate0.4-sigma0.9" / "sglang-lpm" / f"{seed}.yaml", decode)
        run = out / "live" / "rate0.4-sigma0.9" / "sglang-lpm" / seed / "run.json"
        run.parent.mkdir(parents=True)
        run.write_text(json.dumps({"run_window": {"start_unix": start}}))
    return out


def test_predictors_are_judged_on_the_instances_later_runs(tmp_path: Path):
    df = errors(_study(tmp_path))
    assert set(df["scale"]) == {"decode_scale"}          # the runs measured no prefill scale
    got = df.groupby("predictor")["abs_log_ratio"].apply(list).to_dict()
    pooled = (1.2 * 100 + 1.0 * 200) / 300
    assert got["calibration trace"] == pytest.approx([abs(math.log(1.1 / 1.2)), abs(math.log(1.3 / 1.2))])
    assert got["the run before"] == pytest.approx([abs(math.log(1.1 / 1.0)), abs(math.log(1.3 / 1.1))])
    assert got["calibration trace + first run"] == pytest.approx([abs(math.log(1.1 / pooled)),
                                                                   abs(math.log(1.3 / pooled))])
    # the other seeds': seed-1 (300 gaps at 1.1) against the calibration and seed-3 and seed-2, and so on
    others = [math.exp((100 * math.log(1.2) + 200 * math.log(1.0) + 300 * math.log(1.3)) / 600),
              math.exp((100 * math.log(1.2) + 200 * math.log(1.0) + 300 * math.log(1.1)) / 600)]
    assert got["the instance's other seeds"] == pytest.approx([abs(math.log(1.1 / others[0])),
                                                               abs(math.log(1.3 / others[1]))])
    # the only SGLang instance with a calibration: the family's calibration traces are its own
    assert got["the family's calibration traces"] == pytest.approx(got["calibration trace"])
    table = summary([df]).set_index("predictor")
    assert (table["runs"] == 2).all()


def test_the_family_predictor_is_the_geometric_mean_of_its_engines_calibrations(tmp_path: Path):
    out = _study(tmp_path)
    _profile(out / "profiles" / "sglang-fcfs-c512.yaml", (1.5, 300))       # another SGLang instance
    vllm = {"cost": {"overheads": {"vllm-v1": {"decode_scale": {"value": 3.0, "basis": "measured",
                                                               "source": "x: over 9 gaps"}}}}}
    (out / "profiles" / "vllm-c512.yaml").write_text(yaml.safe_dump(vllm))  # another engine: not pooled
    df = errors(out)
    fam = df[(df["config"] == "sglang-lpm") & (df["predictor"] == "the family's calibration traces")]
    g = math.sqrt(1.2 * 1.5)
    assert list(fam["abs_log_ratio"]) == pytest.approx([abs(math.log(1.1 / g)), abs(math.log(1.3 / g))])
    # the engine-pooled twin's: the same two calibrations weighted by the gaps each measured over
    pool = df[(df["config"] == "sglang-lpm") & (df["predictor"] == ENGINE_POOLED)]
    w = math.exp((100 * math.log(1.2) + 300 * math.log(1.5)) / 400)
    assert list(pool["abs_log_ratio"]) == pytest.approx([abs(math.log(1.1 / w)), abs(math.log(1.3 / w))])


def test_a_folder_without_measured_scales_is_one_clear_error(tmp_path: Path, capsys):  # type: ignore[no-untyped-def]
    assert main([str(tmp_path)]) == 2
    assert "no instance with measured scales" in capsys.readouterr().out


def test_by_instance_says_where_each_instances_runs_sat_against_its_engines_pool(tmp_path: Path, capsys):  # type: ignore[no-untyped-def]
    out = _study(tmp_path)
    _profile(out / "profiles" / "sglang-fcfs-c512.yaml", (1.5, 300))       # no study runs: no row
    row = by_instance(out).set_index("config").loc["sglang-lpm"]
    pool = math.exp((100 * math.log(1.2) + 300 * math.log(1.5)) / 400)
    runs = math.exp((300 * math.log(1.1) + 300 * math.log(1.3) + 200 * math.log(1.0)) / 800)
    assert row["calibration"] == 1.2 and row["runs"] == 3
    assert row["engine_pooled"] == pytest.approx(pool)
    assert row["runs_pooled"] == pytest.approx(runs) and row["runs_median"] == pytest.approx(1.1)
    assert row["excess_ln"] == pytest.approx(math.log(runs / pool))
    assert main([str(out), "--by-instance"]) == 0
    assert "sglang-lpm" in capsys.readouterr().out
