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


def test_the_run_window_is_the_wall_time_of_the_records_clock(tmp_path: Path, monkeypatch):
    """run.json's start_unix + a request's send_s is when it was sent (Prometheus windows and engine logs
    are matched to the records through it), however long the host sample before the clock starts takes."""
    import time

    from live import host
    from live.dispatcher import DispatchConfig
    from live.run import LiveOptions, run_live
    from scenarios import compile_trace, scenario_from_dict

    sample, slow_s = host.sample, 1.0

    def slow_sample(**kw):  # type: ignore[no-untyped-def]
        time.sleep(slow_s)
        return sample(**kw)
    monkeypatch.setattr(host, "sample", slow_sample)
    srv = FakeOpenAI().start()
    try:
        trace = compile_trace(scenario_from_dict({"duration_s": 4, "arrivals": {"kind": "constant", "rate": 1.0},
                                                  "prompts": {"prefix_tokens": 8, "suffix_tokens": 4}}))
        rec = run_live(trace, DispatchConfig(endpoint=srv.url, model="fake", warmup=0), LiveOptions("fake"),
                       tmp_path / "run")
    finally:
        srv.stop()
    sent = sorted(rec.meta["run_window"]["start_unix"] + rec.requests["send_s"])
    assert len(sent) == len(srv.arrivals) > 2
    # a clock started before the sample would put every request slow_s late at the server; one request the
    # server read late (a loaded host: the other test worker runs an engine) must not fail the test, so the
    # median is what is held
    lags = sorted(a - s for a, s in zip(sorted(srv.arrivals), sent, strict=True))
    assert abs(lags[len(lags) // 2]) < 0.1 * slow_s
