"""The campaign runner: retries keep every failed attempt, a re-run skips what passed."""

from __future__ import annotations

from pathlib import Path

import yaml

from analysis.records import read_run
from live.campaign import load_campaign, run_campaign
from tests.fake_openai import FakeOpenAI


def test_retry_keep_failed_then_resume(tmp_path: Path):
    srv = FakeOpenAI(fail_first=10).start()          # the first attempt sees failures, the retry does not
    try:
        sc = tmp_path / "s.yaml"
        sc.write_text(yaml.safe_dump({"name": "c", "duration_s": 15, "arrivals": {"kind": "constant", "rate": 0.5},
                                      "prompts": {"prefix_tokens": 16, "suffix_tokens": 8},
                                      "outputs": {"planner": 4, "worker": 4, "aggregator": 4},
                                      "tools": {"mcp": {"kind": "constant", "median_s": 0.05, "p95_s": 0.1}}}))
        camp = tmp_path / "c.yaml"
        camp.write_text(yaml.safe_dump({"name": "t", "pause_s": 0, "retries": 2, "warmup": 0, "scenario": str(sc),
                                        "seeds": [1, 2],
                                        "configs": [{"label": "fake", "endpoint": srv.url, "model": "fake"}]}))
        out = tmp_path / "out"
        status = run_campaign(load_campaign(camp), out, log=lambda s: None)
        assert status == {"fake/seed-1": "passed", "fake/seed-2": "passed"}
        assert (out / "fake" / "seed-1.failed-1" / "run.json").is_file()         # the failed attempt is kept
        assert read_run(out / "fake" / "seed-1.failed-1").meta["errors_by_kind"]["http_5xx"] >= 1
        before = srv.completions
        status = run_campaign(load_campaign(camp), out, log=lambda s: None)
        assert set(status.values()) == {"skipped"} and srv.completions == before
        assert read_run(out / "fake" / "seed-1").meta["prefix_cache_reset"] is None     # not asked for
        camp.write_text(camp.read_text() + "cold_cache: true\n")
        run_campaign(load_campaign(camp), tmp_path / "cold", log=lambda s: None)
        assert read_run(tmp_path / "cold" / "fake" / "seed-2").meta["prefix_cache_reset"] == "/reset_prefix_cache"
    finally:
        srv.stop()
