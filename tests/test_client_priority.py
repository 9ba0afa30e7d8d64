"""A client sharing CPUs with the engine it measures: it can run at real-time priority without passing
that priority to the engine it starts, it says when it could not, and a run whose client fell behind its
schedule says so in its record."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from typing import Any

import pandas as pd
import pytest

from live.run import CLIENT_LAG_WARN_S, build_record, summary_line
from scenarios import compile_trace, scenario_from_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_child(code: str) -> list[str]:
    """Run code in a fresh interpreter (never change this test process's own priority); its stdout lines."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True,
                         cwd=ROOT, timeout=60)
    return out.stdout.split()


def test_a_normal_process_reports_normal_scheduling():
    assert _in_child("from live.priority import client_scheduling; print(client_scheduling())") == ["normal"]


@pytest.mark.skipif(not hasattr(os, "SCHED_RESET_ON_FORK"), reason="Linux scheduling policies")
def test_realtime_client_does_not_pass_its_priority_to_what_it_starts():
    got = _in_child("""
        import os, subprocess, sys, threading
        from live.priority import realtime_client, client_scheduling
        print(realtime_client())
        child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                               capture_output=True, text=True).stdout.strip()
        seen = []
        t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0))); t.start(); t.join()
        print(child, seen[0], client_scheduling())
    """)
    if got[0] != "fifo":                      # no privilege here: it says why, and nothing changed
        assert got[0] == "normal" and got[-1] == "normal"
        pytest.skip(f"SCHED_FIFO not permitted here: {' '.join(got[:-3])}")
    child_policy, thread_policy, own = got[-3:]
    assert own == "fifo"
    assert int(child_policy) == os.SCHED_OTHER          # an engine the client launches runs at normal priority
    assert int(thread_policy) == os.SCHED_OTHER         # and so do helper threads


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop privileges")
def test_without_the_privilege_it_says_why_and_goes_on():
    got = _in_child("""
        import os
        from live.priority import realtime_client, client_scheduling
        os.setgid(65534); os.setuid(65534)
        print(realtime_client().replace(" ", "_"), client_scheduling())
    """)
    assert got == ["normal_(SCHED_FIFO_needs_root_or_CAP_SYS_NICE)", "normal"]


def _rows(lags_s: list[float]) -> tuple[Any, list[dict[str, Any]]]:
    trace = compile_trace(scenario_from_dict({
        "name": "lag", "seed": 3, "duration_s": 20.0, "arrivals": {"kind": "gamma", "rate": 1.0, "cv": 1.0},
        "prompts": {"length": 256, "sharing": 0.5}, "outputs": {"planner": 4, "worker": 4, "aggregator": 4}}))
    a = trace.arrays
    rows = []
    for i in range(trace.n_requests):
        planned = float(a["arrival_s"][i])
        send = planned + lags_s[i % len(lags_s)]
        rows.append({"request_id": i, "dag_id": int(a["dag"][i]), "role": trace.role_name(i), "planned_s": planned,
                     "send_s": send, "first_token_s": send + 0.02, "last_token_s": send + 0.05, "output_tokens": 4,
                     "prompt_tokens": 256, "cached_tokens": math.nan, "ok": True, "error": "",
                     "chunk_times": [send + 0.02, send + 0.05], "chunk_tokens": [1, 3]})
    return trace, rows


def _meta() -> dict[str, Any]:
    return {"run_id": "x", "status": "complete", "host": {}, "client": {"scheduling": "normal"}}


def test_a_client_behind_its_schedule_is_flagged_in_the_record():
    trace, rows = _rows([0.0005, 0.001, 0.150])          # every third send 150 ms late
    rec = build_record(trace, rows, _meta(), pd.DataFrame())
    assert rec.meta["dispatch_lag_s"]["p99"] > CLIENT_LAG_WARN_S
    [warning] = rec.meta["measurement_warnings"]
    assert warning.startswith("client lag: 1 % of requests were sent over 150 ms after their planned time")
    assert "client lag" in summary_line(rec) and "(client normal)" in summary_line(rec)


def test_a_client_on_schedule_is_not_flagged():
    trace, rows = _rows([0.0005, 0.001, 0.002])
    rec = build_record(trace, rows, _meta(), pd.DataFrame())
    assert "measurement_warnings" not in rec.meta
    assert "warning" not in summary_line(rec)

