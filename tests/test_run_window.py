"""The run window: telemetry figures as they stood within the trace's duration T (the study's series were pulled
for the run window), beside the whole run's, which count the drain after T as well."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics import run_metrics
from live import telemetry as live_telemetry
from scenarios import compile_trace
from simulator import simulate
from simulator.telemetry import Telemetry
from tests.conftest import small_scenario


def test_telemetry_keeps_what_stood_at_the_last_step_within_the_window():
    tel = Telemetry(0.0, window_s=2.0)
    for t, kv, waiting, pre in ((1.0, 0.5, 3, 0), (2.0, 0.6, 1, 1), (3.0, 0.9, 7, 5)):
        tel.sample(t, kv, waiting, 4, pre, 0, 0)
    s = tel.summary(5, 0, 0)
    assert (s["kv_usage_peak_window"], s["waiting_peak_window"], s["preemptions_window"]) == (0.6, 3, 1)
    assert (s["kv_usage_peak"], s["waiting_peak"], s["preemptions"]) == (0.9, 7, 5)
    assert "preemptions_window" not in Telemetry(1.0).summary(0, 0, 0)      # no window, no window figures


def test_an_overloaded_run_counts_its_window_and_its_drain_apart():
    """An overloaded vLLM with a small pool, every step sampled: the window's count is the counter at the last
    step that ended by T, and the drain's preemptions are in the whole run's count only."""
    trace = compile_trace(small_scenario(duration_s=60, arrivals={"rate": 2.0}))
    rec = simulate(trace, "vllm-0.6.3", overrides={"enable_prefix_caching": True, "num_gpu_blocks": 200},
                   context=2048, telemetry_interval_s=0.0)
    m, tel = run_metrics(rec), rec.telemetry
    t, pre, kv = (np.asarray(tel[c]) for c in ("t_s", "preemptions", "kv_usage"))
    inside = t <= 60.0
    assert rec.meta["run_window"]["end_s"] > 60.0 and m["preemptions_run"] > m["preemptions"] > 0
    assert m["preemptions"] == pre[inside][-1] and m["preemptions_run"] == pre[-1]
    assert m["kv_peak"] == kv[inside].max() and m["kv_peak_run"] == kv.max()


def test_a_live_summary_takes_the_samples_within_the_window():
    df = pd.DataFrame({"t_s": [0.0, 5.0, 10.0, 15.0], "kv_usage": [0.1, 0.4, 0.3, 0.9],
                       "waiting": [0, 2, 1, 9], "running": [1, 1, 1, 1], "preemptions": [7.0, 7.0, 8.0, 12.0],
                       "prefix_hit_tokens": [0, 0, 0, 0], "prefix_query_tokens": [0, 0, 0, 0]})
    s = live_telemetry.summary(df, window_s=10.0)
    assert (s["kv_usage_peak_window"], s["waiting_peak_window"], s["preemptions_window"]) == (0.4, 2.0, 1.0)
    assert (s["kv_usage_peak"], s["preemptions"]) == (0.9, 5.0)
    assert "preemptions_window" not in live_telemetry.summary(df)
    # an engine that exports no preemption counter (SGLang 0.4.1: no retraction counter): unknown, not zero
    s = live_telemetry.summary(df.assign(preemptions=np.nan), window_s=10.0)
    assert np.isnan(s["preemptions"]) and np.isnan(s["preemptions_window"])


def test_the_absolute_table_keeps_an_uncounted_figure_unknown():
    from analysis.tables import LATENCY, absolute_table
    row = {"condition": "c", "arm": "a", "config": "sglang", "engine": "sglang-0.4.1", "throughput": 1.0,
           "offered_load": 1.0, "realised_load": 1.0, "keeps_pace_realised": True, "kv_peak": 0.5,
           "prefix_hit_fraction": 0.9, **{m: 1.0 for m in LATENCY}}
    t = absolute_table(pd.DataFrame([{**row, "preemptions": np.nan}, {**row, "preemptions": np.nan}]))
    assert np.isnan(t["preemptions"].iloc[0]) and np.isnan(t["preemptions_max"].iloc[0])
    t = absolute_table(pd.DataFrame([{**row, "preemptions": 2}, {**row, "preemptions": 5}]))
    assert t["preemptions_max"].iloc[0] == 5 and t["preemptions"].iloc[0] == 3.5
