"""The agent-loop post's workload: chain sessions with their own first-turn length and carried replies, the
per-turn table and figure, and the AWQ model's weight bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.turns import turn_table
from scenarios import compile_trace, validate_trace
from scenarios.spec import load_scenario
from simulator import simulate
from simulator.profiles import load_model
from tests.conftest import small_scenario

ROOT = Path(__file__).parent.parent


def _chain(**chain):  # type: ignore[no-untyped-def]
    return small_scenario(arrivals={"kind": "replay", "times": [0.0, 0.0, 0.0]}, duration_s=120,
                          topology={"kind": "chain", "turns": 4, "tool": "mcp", **chain},
                          prompts={"prefix_tokens": 300, "suffix_tokens": 40, "length": None, "sharing": None},
                          outputs={"turn": 20})


def test_first_turn_and_reply_lengths_shape_the_prompts():
    t = validate_trace(compile_trace(_chain(first_turn_tokens=10, history_reply_tokens=3)))
    lens = t.prompt_lengths()[:4].tolist()
    assert lens == [310, 310 + 3 + 40, 310 + 3 + 40 + 3 + 40, 310 + 3 * (3 + 40)]
    plain = compile_trace(_chain())
    assert plain.prompt_lengths()[:2].tolist() == [340, 340 + 20 + 40]      # the whole output is carried
    assert "first_turn_tokens" not in plain.manifest["scenario"]["topology"]


def test_each_turn_extends_the_previous_prompt():
    t = compile_trace(_chain(first_turn_tokens=10))
    p0, p1 = t.prompt(0), t.prompt(1)
    assert np.array_equal(p1[:p0.size], p0)


def test_the_post_scenario_compiles_as_described():
    t = validate_trace(compile_trace(load_scenario(ROOT / "scenarios" / "examples" / "agent-loop.yaml")))
    assert t.n_dags == 16 and t.n_requests == 96
    assert t.prompt_lengths()[:6].tolist() == [4000, 4550, 5100, 5650, 6200, 6750]
    assert set(t.arrays["max_tokens"].tolist()) == {100}


def test_turn_table_reports_cold_and_warm_turns(tmp_path: Path):
    from paper_figures.study_figures import ttft_by_turn
    t = compile_trace(_chain(first_turn_tokens=10))
    runs = [simulate(t, "vllm-0.6.3", overrides={"enable_prefix_caching": True}), simulate(t, "sglang-0.4.1")]
    tab = turn_table(runs)
    assert sorted(tab["turn"].unique().tolist()) == [1, 2, 3, 4]
    assert (tab["requests"] == 3).all()
    warm = tab[tab["turn"] > 1]
    assert (warm["ttft_mean_ms"] < warm["cold_ms"]).all()                  # later turns hit the cache
    assert (tab["ttft_min_ms"] <= tab["ttft_mean_ms"]).all() and (tab["ttft_mean_ms"] <= tab["ttft_max_ms"]).all()
    assert tab["warm_reduction"].between(0, 1).all() and (tab["output_tok_s"] > 0).all()
    assert ttft_by_turn(tab, tmp_path).is_file()


def test_awq_weights_are_four_bit_linears_and_fp16_embeddings():
    awq, full = load_model("qwen2.5-14b-awq"), load_model("qwen2.5-14b")
    assert awq.kv_bytes_per_token() == full.kv_bytes_per_token()
    ratio = awq.weight_bytes / full.weight_bytes
    assert 0.30 < ratio < 0.36                                             # 9.3 GiB of 27.5 GiB
    assert awq.weight_bytes / 2**30 == pytest.approx(9.29, abs=0.05)
