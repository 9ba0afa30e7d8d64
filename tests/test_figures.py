"""Figures build from small simulated runs, byte-identically, and say which runs they are missing."""

from __future__ import annotations

from pathlib import Path

import yaml

from analysis.records import find_runs, read_run
from paper_figures.figures import headline_figures
from scenarios.grid import cells, load_grid
from simulator.sweep import run_cells

GRID = {"name": "fig", "seeds": [1, 2],
        "base": {"duration_s": 60, "prompts": {"length": 1024, "sharing": 0.9}},
        "sweep": {"arrivals.rate": [0.2, 0.5], "prompts.sharing": [0.5, 0.9]},
        "arms": {"defaults": {"vllm": {"engine": "vllm-0.6.3", "set": {"enable_prefix_caching": True}},
                              "sglang": {"engine": "sglang-0.4.1"}},
                 "matched": {"vllm": {"engine": "vllm-0.6.3", "set": {"enable_prefix_caching": True,
                                                                        "enable_chunked_prefill": True,
                                                                        "max_num_batched_tokens": 2048}},
                             "sglang": {"engine": "sglang-0.4.1", "set": {"chunked_prefill_size": 2048}}}}}


def test_figures_deterministic_and_complete(tmp_path: Path):
    g = tmp_path / "g.yaml"
    g.write_text(yaml.safe_dump(GRID))
    run_cells(cells(load_grid(g)), tmp_path / "runs", jobs=2)
    runs = [read_run(p) for p in find_runs([tmp_path / "runs"])]
    a = headline_figures(runs, tmp_path / "a")
    b = headline_figures(runs, tmp_path / "b")
    assert {p.name for p in a} >= {"decomposition.png", "ttft_vs_rate.png", "throughput.png", "ttft_cdf.png",
                                   "tpot_vs_rate.png", "fluid_model.png", "sharing.png", "variability.png",
                                   "gaps_vs_rate.png", "gap_by_arm.png"}
    assert "gap_vs_run_length" in (tmp_path / "a" / "MISSING.txt").read_text()     # one run length only
    for pa, pb in zip(a, b, strict=True):
        assert pa.read_bytes() == pb.read_bytes(), pa.name
        assert pa.stat().st_size > 5000
    # one engine, one rate, one arm: the figures that need more say what they need
    few = [r for r in runs if r.meta["labels"]["config"] == "sglang" and r.meta["labels"]["arm"] == "defaults"
           and r.meta["labels"]["condition"] == "rate=0.2-sharing=0.9"]
    made = headline_figures(few, tmp_path / "c")
    missing = (tmp_path / "c" / "MISSING.txt").read_text()
    assert "decomposition needs paired runs" in missing and "at least two 'rate-" in missing
    assert {p.name for p in made} == {"throughput.png", "ttft_cdf.png"}
    assert "sharing figures need runs at two or more sharing ratios" in missing


def test_measured_vs_simulated_figure(tmp_path: Path):
    import pandas as pd
    import pytest

    from paper_figures.figures import MissingRuns, measured_vs_simulated
    t = pd.DataFrame([{"config": c, "seed": s, "metric": m, "measured": v, "simulated": v * f, "rel_error": f - 1}
                      for c, f in (("a", 1.1), ("b", 0.8)) for s in (1, 2)
                      for m, v in (("ttft_p50", 0.3), ("throughput", 2.0))])
    p1 = measured_vs_simulated(t, tmp_path / "x")
    p2 = measured_vs_simulated(t, tmp_path / "y")
    assert p1.read_bytes() == p2.read_bytes()
    with pytest.raises(MissingRuns):
        measured_vs_simulated(t.iloc[0:0], tmp_path / "z")
