"""Sweeps: resumable, identical whichever executor ran them, tables refuse to pool mixed configs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.records import RecordError, find_runs, read_run
from analysis.tables import all_tables
from foundation.errors import SpecError
from scenarios.grid import cells, load_grid
from simulator.sweep import run_cells, trace_groups

ROOT = Path(__file__).parent.parent

GRID = {
    "name": "tiny", "seeds": [1, 2, 3],
    "base": {"duration_s": 60, "arrivals": {"rate": 0.3}, "prompts": {"length": 1024, "sharing": 0.9}},
    "sweep": {"arrivals.rate": [0.2, 0.5]},
    "arms": {"defaults": {"vllm": {"engine": "vllm-0.6.3", "set": {"enable_prefix_caching": True}},
                          "sglang": {"engine": "sglang-0.4.1"}},
             "matched": {"vllm": {"engine": "vllm-0.6.3", "set": {"enable_prefix_caching": True,
                                                                    "enable_chunked_prefill": True,
                                                                    "max_num_batched_tokens": 2048}},
                         "sglang": {"engine": "sglang-0.4.1", "set": {"chunked_prefill_size": 2048}}}},
}


def grid_file(tmp_path: Path, duration_s: float | None = None) -> Path:
    """The tiny grid; ``duration_s`` lengthens its runs where a test must catch the sweep in the middle (a trace's
    cells run as one task, so 60-s runs can all finish between two polls)."""
    grid = GRID if duration_s is None else {**GRID, "base": {**GRID["base"], "duration_s": duration_s}}
    f = tmp_path / "g.yaml"
    f.write_text(yaml.safe_dump(grid))
    return f


def test_all_study_grids_load():
    for f in sorted((ROOT / "scenarios" / "grids").glob("*.yaml")):
        if yaml.safe_load(f.read_text()).get("kind") == "twin-study":
            with pytest.raises(SpecError, match="servetwin twin-study"):    # the twin study's design
                load_grid(f)
            continue
        assert cells(load_grid(f)), f.name


def test_sweep_resumes_after_kill(tmp_path: Path):
    g = grid_file(tmp_path, duration_s=600)
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "servetwin.cli", "sweep", str(g), "--out", str(out), "--jobs", "1"],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(find_runs([out]) if out.exists() else []) < 4 and time.time() < deadline:
        time.sleep(0.05)
    p.kill()
    p.wait()
    first = {r: (r / "run.json").stat().st_mtime_ns for r in find_runs([out])}
    assert 4 <= len(first) < 24
    r = subprocess.run([sys.executable, "-m", "servetwin.cli", "sweep", str(g), "--out", str(out), "--jobs", "1"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    after = find_runs([out])
    assert len(after) == 24
    for run, mtime in first.items():
        assert (run / "run.json").stat().st_mtime_ns == mtime      # not run twice
    assert not list(out.rglob(".seed-*"))                          # no half-written cells left


def test_cells_of_one_trace_run_together_heaviest_first(tmp_path: Path):
    cs = cells(load_grid(grid_file(tmp_path)))
    groups = trace_groups(cs)
    assert sorted(c.key for g in groups for c in g) == sorted(c.key for c in cs)     # each cell once
    for g in groups:     # one trace: both engines and both arms of one rate and seed
        assert len({(c.scenario["arrivals"]["rate"], c.seed) for c in g}) == 1 and len(g) == 4
    rates = [g[0].scenario["arrivals"]["rate"] for g in groups]
    assert rates == sorted(rates, reverse=True)                    # the heaviest traces are given out first


def test_pool_and_sequential_identical(tmp_path: Path):
    cs = cells(load_grid(grid_file(tmp_path)))[:6]
    run_cells(cs, tmp_path / "a", jobs=1)
    run_cells(cs, tmp_path / "b", jobs=2)
    for c in cs:
        a, b = read_run(tmp_path / "a" / c.key), read_run(tmp_path / "b" / c.key)
        pd.testing.assert_frame_equal(a.requests, b.requests)


def test_tables_and_refusal_to_pool(tmp_path: Path):
    cs = cells(load_grid(grid_file(tmp_path)))
    run_cells(cs, tmp_path / "o", jobs=2)
    runs = [read_run(p) for p in find_runs([tmp_path / "o"])]
    t = all_tables(runs)
    assert len(t["absolute"]) == 8 and len(t["decomposition"]) == 10
    assert set(t["gaps"]["n"]) == {3}
    dec = t["decomposition"].dropna(subset=["phi"])
    assert not dec.empty                                           # φ with its 95 % interval over the seeds
    assert ((dec["phi_lo"] <= dec["phi"]) & (dec["phi"] <= dec["phi_hi"])).all()
    bad = runs[0]
    bad.meta["engine_config"] = {**bad.meta["engine_config"], "max_num_seqs": 7}
    with pytest.raises(RecordError, match="refusing to pool"):
        all_tables(runs)


def test_ray_executor_matches_local(tmp_path: Path):
    ray = pytest.importorskip("ray")
    cs = cells(load_grid(grid_file(tmp_path)))[:4]
    run_cells(cs, tmp_path / "local", jobs=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        run_cells(cs, tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    for c in cs:
        a, b = read_run(tmp_path / "local" / c.key), read_run(tmp_path / "ray" / c.key)
        pd.testing.assert_frame_equal(a.requests, b.requests)
        assert a.meta["telemetry_summary"] == b.meta["telemetry_summary"]


def test_ctrl_c_stops_a_parallel_sweep_within_seconds_keeping_completed_cells(tmp_path: Path):
    import signal
    g = grid_file(tmp_path, duration_s=600)
    out = tmp_path / "out"
    # as from a terminal: a suite started in the background by a shell hands its children SIGINT ignored, which
    # Python keeps (the sweep would then finish instead of stopping)
    p = subprocess.Popen([sys.executable, "-m", "servetwin.cli", "sweep", str(g), "--out", str(out), "--jobs", "2"],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while len(find_runs([out]) if out.exists() else []) < 2 and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    t0 = time.time()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and time.time() - t0 < 10, err
    assert "Traceback" not in err
    kept = find_runs([out])
    assert 2 <= len(kept) < 24
    for r in kept:
        read_run(r)                                                 # every cell kept is whole and sealed


def test_resume_reruns_cells_of_another_duration_or_an_edited_grid(tmp_path: Path):
    from simulator.sweep import pending
    g = grid_file(tmp_path)
    cs = [c for c in cells(load_grid(g)) if "0.5" in c.condition][:2]
    quick = [c for c in cells(load_grid(g), 1 / 3) if "0.5" in c.condition][:2]
    run_cells(quick, tmp_path / "o", jobs=1)
    assert len(pending(quick, tmp_path / "o")) == 0
    assert len(pending(cs, tmp_path / "o")) == 2                    # --quick runs do not count for the full grid
    run_cells(cs, tmp_path / "o", jobs=1)
    assert len(pending(cs, tmp_path / "o")) == 0
    edited = {**GRID, "arms": {"defaults": {"vllm": {"engine": "vllm-0.6.3", "set": {"enable_prefix_caching": True,
                                                                                      "block_size": 32}},
                                            "sglang": {"engine": "sglang-0.4.1",
                                                       "set": {"chunked_prefill_size": 1024}}}}}
    f = tmp_path / "edited.yaml"
    f.write_text(yaml.safe_dump(edited))
    vllm = [c for c in cells(load_grid(f)) if c.key == cs[0].key]
    assert vllm and pending(vllm, tmp_path / "o") == vllm          # another engine configuration: run again
    rec = tmp_path / "o" / cs[1].key / "requests.parquet"
    rec.write_bytes(rec.read_bytes()[:-8])
    assert [c.key for c in pending(cs, tmp_path / "o")] == [cs[1].key]   # a damaged record: run again
