"""The fluid models against simulation of a degenerate FCFS server (constant service, batch 1)."""

from __future__ import annotations

import pytest

from analysis.fluid import closed_loop_wait, fluid_wait, shortfall
from analysis.metrics import run_metrics
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from tests.helpers import constant_hardware

D, T = 0.1, 600.0


@pytest.mark.parametrize("req_rate", [12.0, 15.0, 20.0])
def test_closed_loop_model_predicts_simulated_median_wait(req_rate):
    sc = scenario_from_dict({"seed": 1, "duration_s": T, "arrivals": {"kind": "poisson", "rate": req_rate / 6},
                             "prompts": {"prefix_tokens": 0, "suffix_tokens": 8},
                             "outputs": {"planner": 1, "worker": 1, "aggregator": 1},
                             "tools": {"mcp": {"kind": "constant", "median_s": 0.5, "p95_s": 1.0}}})
    rec = simulate(compile_trace(sc), "vllm-0.6.3", hardware=constant_hardware(D),
                   overrides={"max_num_seqs": 1}, timeout_s=0)
    m = run_metrics(rec)
    wait = m["ttft_p50"] - D
    closed = closed_loop_wait(m["throughput"], req_rate / 6, [1, 4, 1], T)
    open_ = fluid_wait(shortfall(m["throughput"], req_rate), T)
    assert closed == pytest.approx(wait, rel=0.12)
    assert open_ > 1.3 * wait                      # the open model over-predicts, as the study observed


def test_capacity_search_on_a_degenerate_engine():
    """Batch 1, constant service D = 0.1 s, one request per DAG: capacity is 1/D = 10 requests/s."""
    from analysis.metrics import KEEPS_PACE, run_metrics
    from simulator.capacity import capacity_search
    sc = scenario_from_dict({"seed": 1, "duration_s": 1200, "arrivals": {"kind": "poisson", "rate": 1.0},
                             "topology": {"kind": "chain", "turns": 1},
                             "prompts": {"prefix_tokens": 0, "suffix_tokens": 8}, "outputs": {"turn": 1}})
    cap = capacity_search(sc, "vllm-0.6.3", constant_hardware(D), overrides={"max_num_seqs": 1},
                          lo=2.0, hi=16.0, seeds=(1, 2), rel_tol=0.02, measure=run_metrics, keeps_fraction=KEEPS_PACE)
    assert cap.keeps_rate < cap.fails_rate
    # keeps pace means X ≥ 0.97 Λ, so loads up to 10/0.97 still pass
    assert 9.0 <= cap.keeps_load <= 10 / 0.97 and cap.fails_load <= 10.6
    assert cap.pace == "nominal" and 9.0 <= cap.sustained <= 10.3        # X where it last kept pace
    assert cap.tried and all(x <= 10.3 for x in cap.tried.values())       # never beyond 1/D (+ end effects)
    assert 9.5 <= cap.saturated <= 10.3 and cap.saturated_rate > cap.fails_rate    # the service rate 1/D


def test_the_most_sustained_is_searched_no_higher_than_max_rate():
    """With ``max_rate`` the search past the knee stops there: the most sustained is the highest X at or below it
    (the study's C6 is the top of its rate sweep, not the service rate)."""
    from analysis.metrics import KEEPS_PACE, run_metrics
    from simulator.capacity import capacity_search
    sc = scenario_from_dict({"seed": 1, "duration_s": 600, "arrivals": {"kind": "poisson", "rate": 1.0},
                             "topology": {"kind": "chain", "turns": 1},
                             "prompts": {"prefix_tokens": 0, "suffix_tokens": 8}, "outputs": {"turn": 1}})
    kw = {"overrides": {"max_num_seqs": 1}, "lo": 2.0, "hi": 16.0, "seeds": (1,), "rel_tol": 0.05,
          "measure": run_metrics, "keeps_fraction": KEEPS_PACE}
    free = capacity_search(sc, "vllm-0.6.3", constant_hardware(D), **kw)
    top = 11.0
    capped = capacity_search(sc, "vllm-0.6.3", constant_hardware(D), max_rate=top, **kw)
    assert free.saturated_rate > top and capped.saturated_rate <= top
    assert capped.saturated == max(x for r, x in capped.tried.items() if r <= top)
    assert (capped.keeps_rate, capped.fails_rate) == (free.keeps_rate, free.fails_rate)
