"""run.json's typed contract (analysis.run_meta.RunMeta): every field documented, every field the simulator
writes declared, version-2 records still read, a wrong type refused in one line, and the per-instance
calibration a simulated run used recorded in it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from analysis.records import RecordError, _json_sha, read_run, write_run
from analysis.run_meta import RunMeta
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.cluster import ClusterSpec
from simulator.cluster_run import simulate_cluster
from simulator.profiles import InstanceCalibration, load_hardware

TRACE = compile_trace(scenario_from_dict({"duration_s": 20, "arrivals": {"rate": 0.3},
                                          "prompts": {"length": 512, "sharing": 0.5}}))


def _reseal(run: Path, **changes: object) -> None:
    meta = json.loads((run / "run.json").read_text())
    meta.update(changes)
    meta["digests"]["run.json"] = _json_sha({k: v for k, v in meta.items() if k != "digests"} | {
        "digests": {k: v for k, v in meta["digests"].items() if k != "run.json"}})
    (run / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def test_every_field_is_documented():
    undocumented = [k for k, f in RunMeta.model_fields.items() if not f.description
                    and not (isinstance(f.annotation, type) and issubclass(f.annotation, RunMeta.__base__))]
    assert not undocumented, undocumented


def test_the_simulator_writes_only_declared_fields():
    cluster = simulate_cluster(TRACE, ClusterSpec(("vllm-v1", "vllm-v1"), "round_robin"), "l4", "llama-3.1-8b")
    for rec in (simulate(TRACE, "sglang-0.4.1"), cluster):
        extra = set(rec.meta) - set(RunMeta.model_fields)
        assert not extra, extra


def test_a_version_2_record_is_still_read(tmp_path: Path):
    run = write_run(simulate(TRACE, "vllm-0.6.3"), tmp_path / "r")
    assert json.loads((run / "run.json").read_text())["schema_version"] == 3
    _reseal(run, schema_version=2)
    from analysis.records import read_meta
    read_meta(run)                       # the seal holds after the edit above (it re-computes it)
    assert read_run(run).meta["schema_version"] == 2


def test_a_field_of_the_wrong_type_is_one_line(tmp_path: Path):
    run = write_run(simulate(TRACE, "vllm-0.6.3"), tmp_path / "r")
    meta = json.loads((run / "run.json").read_text())
    meta["passed"] = "yes"
    from analysis.records import typed_meta
    with pytest.raises(RecordError, match="field 'passed'") as err:
        typed_meta(meta, "r/run.json")
    assert "\n" not in str(err.value)
    rec = simulate(TRACE, "vllm-0.6.3")
    rec.meta["busy_s"] = "long"
    with pytest.raises(RecordError, match="field 'busy_s'"):
        write_run(rec, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_the_instance_calibration_used_is_recorded(tmp_path: Path):
    cal = InstanceCalibration("vllm-v0", decode_scale=1.25, request_s=0.004)
    hw = cal.apply(load_hardware("l4"))
    assert InstanceCalibration.of(hw, "vllm-v0") == cal and not cal.is_identity
    rec = read_run(write_run(simulate(TRACE, "vllm-0.6.3", hw), tmp_path / "r"))
    assert rec.meta["calibration"] == dataclasses.asdict(cal)
    assert "calibration" not in simulate(TRACE, "vllm-0.6.3").meta      # the profile as committed: none
    slow = rec.requests["last_token_s"] - rec.requests["send_s"]
    base = simulate(TRACE, "vllm-0.6.3").requests
    assert (slow > (base["last_token_s"] - base["send_s"])).mean() > 0.9    # the scale is applied, not only noted


def test_a_record_of_columns_reads_back_as_the_same_record_of_frames(tmp_path: Path):
    """The simulator's column tables (written through pyarrow's buffers) and the same tables as DataFrames
    (written through pandas) read back equal: NaN, empty tables, non-ASCII errors and a cluster's replica column."""
    import numpy as np
    import pandas as pd

    from analysis.records import RunRecord
    rec = simulate(TRACE, "sglang-0.4.1", record_tokens=True)
    cols = dict(rec._tables["requests"])
    cols["error"] = np.array(["", "délai dépassé ✗", *([""] * (len(cols["error"]) - 2))], dtype=object)
    cols["cached_tokens"] = cols["cached_tokens"].copy()
    cols["cached_tokens"][0] = np.nan
    cols["replica"] = np.arange(len(cols["error"]), dtype=np.int64) % 2
    empty_tel = {k: v[:0] for k, v in rec._tables["telemetry"].items()}
    a = RunRecord(meta=rec.meta, requests=cols, telemetry=empty_tel, chunks=rec._tables["chunks"])
    b = RunRecord(meta=rec.meta, requests=pd.DataFrame(cols), telemetry=pd.DataFrame(empty_tel),
                  chunks=pd.DataFrame(rec._tables["chunks"]))
    ra, rb = read_run(write_run(a, tmp_path / "a")), read_run(write_run(b, tmp_path / "b"))
    pd.testing.assert_frame_equal(ra.requests, rb.requests)
    pd.testing.assert_frame_equal(ra.telemetry, rb.telemetry)
    pd.testing.assert_frame_equal(ra.chunks, rb.chunks)
    assert ra.requests["error"].iloc[1] == "délai dépassé ✗" and np.isnan(ra.requests["cached_tokens"].iloc[0])
    assert len(ra.telemetry) == 0 and len(ra.chunks) > 0
