"""calibrate.twin.diagnose.step_gaps: on a simulated run its own profile explains the token gaps (lower quartile at the
profile's decode step), and a profile twice as fast is flagged."""

from __future__ import annotations

import dataclasses

from calibrate.twin.diagnose.step_gaps import against_profile, token_gaps
from calibrate.twin.study import scenario
from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.cost_model import CostModel
from simulator.profiles import load_hardware, load_model


def test_gaps_match_the_profile_that_produced_them():
    hw, tiny = load_hardware("cpu-base"), load_model("tiny-llama")
    trace = compile_trace(scenario_from_dict(scenario(0.5, 0.9, 40.0, 1)))
    rec = simulate(trace, "sglang-current", hw, tiny, {"max_total_tokens": 65536}, context=8192, record_tokens=True)
    gaps = token_gaps(rec)
    assert len(gaps) > 1000 and (gaps["streaming"] >= 1).all()
    own = against_profile(gaps, CostModel(hw, tiny, "sglang", 1, 1 << 20, True), 2100)
    busy = own[own["gaps"] >= 200]
    assert len(busy) >= 2 and busy["q1_over_profile"].between(0.75, 1.3).all()
    fast = dataclasses.replace(hw, eta_compute=2 * hw.eta_compute, eta_bandwidth=2 * hw.eta_bandwidth,
                               overheads={k: dataclasses.replace(v, step_graph_s=v.step_graph_s / 2,
                                                                 per_seq_s=v.per_seq_s / 2)
                                          for k, v in hw.overheads.items()})
    flagged = against_profile(gaps, CostModel(fast, tiny, "sglang", 1, 1 << 20, True), 2100)
    assert (flagged[flagged["gaps"] >= 200]["q1_over_profile"] > 1.5).all()
