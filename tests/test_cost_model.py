"""Cost model: scaling properties, published constants, cross-checks, provenance."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import SpecError
from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import GIB, load_hardware, load_model

M = load_model("llama-3.1-8b")


def cm(hw: str = "l4", family: str = "vllm-v0", tp: int = 1) -> CostModel:
    return CostModel(load_hardware(hw), M, family, tp)


def shape(prefills=(), decodes=()):  # type: ignore[no-untyped-def]
    b = BatchShape()
    for q, c in prefills:
        b.add_prefill(q, c, True)
    for c in decodes:
        b.add_decode(c)
    return b


def test_published_byte_sizes():
    assert M.kv_bytes_per_token() == 131072
    assert M.total_params == 8_030_261_248
    assert round(M.weight_bytes / GIB, 2) == 14.96


@settings(max_examples=100, deadline=None)
@given(q=st.integers(1, 8000), c=st.integers(0, 8000), extra=st.integers(1, 2000),
       b=st.integers(1, 128), ctx=st.integers(1, 8000))
def test_monotone(q, c, extra, b, ctx):
    m = cm()
    assert m.step_time(shape([(q + extra, c)])) >= m.step_time(shape([(q, c)]))
    assert m.step_time(shape([(q, c + extra)])) >= m.step_time(shape([(q, c)]))
    assert m.step_time(shape(decodes=[ctx + extra] * b)) > m.step_time(shape(decodes=[ctx] * b))
    assert m.step_time(shape(decodes=[ctx] * (b + 1))) >= m.step_time(shape(decodes=[ctx] * b))


def test_bound_regimes():
    m = cm()
    d1 = m.cost(shape(decodes=[1024]))
    assert d1.memory_s > 5 * d1.compute_s            # batch 1 decode is bandwidth-bound
    p = m.cost(shape([(8192, 0)]))
    assert p.compute_s > 5 * p.memory_s               # a long prefill is compute-bound


# Predictions of the roofline form with the uncalibrated L4 coefficients (docs/cost-model.md), ±3 %
@pytest.mark.parametrize("hw, batch, expected_ms", [
    ("l4-base", shape(decodes=[1024]), 65), ("l4-base", shape(decodes=[2048] * 16), 82),
    ("l4-base", shape([(512, 0)]), 151), ("l4-base", shape([(1024, 0)]), 279), ("l4-base", shape([(4096, 0)]), 1140),
    ("l4-base", shape([(8192, 0)]), 2430), ("a100-80g", shape([(1024, 0)]), 70), ("h100", shape([(4096, 0)]), 108),
])
def test_reference_step_times(hw, batch, expected_ms):
    assert cm(hw).step_time(batch) * 1000 == pytest.approx(expected_ms, rel=0.03)


# Operator-profile and measurement cross-checks: A100-40 decode B=1 13.3 ms measured (vLLM sweep, ±15 %);
# A100-80 1,024-token prefill 65 ms (BLIS fit) to 75 ms (Vidur op sum)
def test_cross_checks():
    assert cm("a100-40g").step_time(shape(decodes=[1024])) * 1000 == pytest.approx(13.3, rel=0.15)
    assert 60 <= cm("a100-80g").step_time(shape([(1024, 0)])) * 1000 <= 80


def test_tensor_parallel_splits_work_and_adds_allreduce():
    one, two = cm("h100", tp=1), cm("h100", tp=2)
    b = shape([(4096, 0)])
    assert two.cost(b).comm_s > 0 and two.step_time(b) < one.step_time(b)


def test_cuda_graph_limit():
    m = CostModel(load_hardware("l4"), M, "sglang", graph_max_bs=8)
    assert m.cost(shape(decodes=[100] * 9)).overhead_s - m.cost(shape(decodes=[100] * 8)).overhead_s > 0.002


def test_profile_without_source_refused(tmp_path: Path):
    src = Path(load_hardware("l4").path)
    data = yaml.safe_load(src.read_text())
    data["peak_flops"] = {"value": 1e12}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="no source"):
        load_hardware(str(bad))


def test_an_unknown_overhead_is_refused_by_name(tmp_path: Path):
    data = yaml.safe_load(Path(load_hardware("cpu-base").path).read_text())
    data["cost"]["overheads"]["vllm-v1"]["front_end_token_x"] = {"value": 0.001, "basis": "measured", "source": "t"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"overheads\.vllm-v1: unknown overhead 'front_end_token_x'; accepted: .*"
                                        "stream_chunk_s"):
        load_hardware(str(bad))


def test_whole_sequence_extend_attention():
    """SGLang's torch_native backend (its CPU path) attends a chunk over the whole sequence: a prefix hit
    saves the linear layers' work but not the attention's."""
    hw, tiny = load_hardware("cpu-base"), load_model("tiny-llama")
    new_only, whole = CostModel(hw, tiny, "sglang"), CostModel(hw, tiny, "sglang", extend_full_attention=True)
    cached, cold = shape([(64, 4096)]), shape([(4160, 0)])
    assert cached.prefill_full_pairs == cold.prefill_full_pairs == 4160 * 4161 / 2
    extra = (cached.prefill_full_pairs - cached.prefill_pairs) * tiny.attention_flops_per_pair
    assert whole.cost(cached).compute_s - new_only.cost(cached).compute_s == pytest.approx(
        extra / (hw.eta_compute * hw.peak_flops))
    assert whole.cost(cold).compute_s == pytest.approx(new_only.cost(cold).compute_s)   # no hit: same work
    assert whole.step_time(cached) < whole.step_time(cold)          # the linear layers still see 64 tokens


def test_cpu_device_resolves_sglang_cpu_defaults():
    from simulator.presets import resolve
    from simulator.simulate import full_extend_attention
    tiny = load_model("tiny-llama")
    cpu = resolve("sglang-current", load_hardware("cpu-base"), tiny, 8192, {"max_total_tokens": 65536})
    gpu = resolve("sglang-current", load_hardware("l4"), M, 8192)
    assert cpu.attention_backend == "torch_native" and full_extend_attention(cpu)
    assert cpu.cuda_graph_max_bs is not None and cpu.cuda_graph_max_bs > 4096     # no graph limit on a CPU
    assert gpu.attention_backend == "flashinfer" and not full_extend_attention(gpu) and gpu.cuda_graph_max_bs == 48


def test_sglang_memory_settings_follow_each_release():
    """0.4.1 (server_args.py): chunk 2,048 and graphs to batch 8 below 25,000 MiB, mem_fraction_static 0.88 at
    TP 1. Current (memory_hook.py handle_gpu_memory_settings): an L4 (23,034 MiB) is in the 20–35 GiB band —
    chunk 4,096, graphs to batch 48 — and keeps (23,034 − 512 − 6,144 − 128 − 96) / 23,034 = 0.701 for weights
    and KV: about 1,500 tokens of KV for an 8B bf16 model, which a 4,096-token agent trace cannot use."""
    from simulator.presets import check_startup, kv_capacity_tokens, resolve
    l4 = load_hardware("l4")
    old, cur = resolve("sglang-0.4.1", l4, M, 16384), resolve("sglang-current", l4, M, 16384)
    assert (old.chunked_prefill_size, old.cuda_graph_max_bs, old.mem_fraction_static) == (2048, 8, 0.88)
    assert (cur.chunked_prefill_size, cur.cuda_graph_max_bs, cur.mem_fraction_static) == (4096, 48, 0.701)
    assert kv_capacity_tokens(cur) < 4096
    with pytest.raises(SpecError, match="mem_fraction_static"):
        check_startup(cur, 4096 + 128)
    h100 = resolve("sglang-current", load_hardware("h100"), M, 16384)
    assert (h100.chunked_prefill_size, h100.cuda_graph_max_bs) == (8192, 256)


def test_per_prefill_token_overhead_counts_whole_sequences():
    """Host-side work per token of every prefilled sequence (its cached part included), not per new token."""
    import dataclasses
    hw, tiny = load_hardware("cpu-base"), load_model("tiny-llama")
    ovh = dataclasses.replace(hw.overhead("sglang"), per_prefill_token_s=1e-5)
    with_term = CostModel(dataclasses.replace(hw, overheads={**hw.overheads, "sglang": ovh}), tiny, "sglang")
    without = CostModel(hw, tiny, "sglang")
    cached = shape([(64, 4096)])
    assert with_term.cost(cached).overhead_s - without.cost(cached).overhead_s == pytest.approx(4160e-5)
    decode = shape(decodes=[4096] * 4)
    assert with_term.cost(decode).overhead_s == without.cost(decode).overhead_s


def test_shared_decode_context_costs_kv_shared_cost_of_a_first_read():
    import dataclasses
    hw, tiny = load_hardware("cpu-base"), load_model("tiny-llama")
    b = shape(decodes=[2048] * 16)
    shared = shape(decodes=[2048] * 16)
    shared.decode_distinct = 1843 + 16 * 205                             # 16 contexts, 1,843 tokens shared
    plain = CostModel(hw, tiny, "vllm-v1")
    assert hw.kv_shared_cost == 1.0 and plain.step_time(shared) == plain.step_time(b)   # default: no saving
    free = CostModel(dataclasses.replace(hw, kv_shared_cost=0.0), tiny, "vllm-v1")
    half = CostModel(dataclasses.replace(hw, kv_shared_cost=0.5), tiny, "vllm-v1")
    assert free.decode_context(shared) == shared.decode_distinct
    assert half.decode_context(shared) == pytest.approx((shared.decode_distinct + b.decode_ctx) / 2)
    assert free.step_time(shared) < half.step_time(shared) < plain.step_time(shared)


@pytest.mark.parametrize("engine,over", [("vllm-v1", {"block_size": 32}),
                                         ("sglang-current", {"max_total_tokens": 65536})])
def test_simulated_decodes_pay_shared_prefix_once_where_the_profile_says_so(engine, over):
    """Block and radix caches share a prefix's KV between requests: with kv_shared_cost 0 the same trace
    decodes faster than with the default (1)."""
    import dataclasses

    from scenarios import compile_trace, scenario_from_dict
    from simulator.simulate import simulate
    sc = {"name": "s", "seed": 1, "duration_s": 20.0, "arrivals": {"kind": "gamma", "rate": 0.5, "cv": 1.0},
          "prompts": {"length": 2048, "sharing": 0.9, "vocab_low": 2, "vocab_high": 4096},
          "outputs": {"planner": 32, "worker": 32, "aggregator": 64}}
    trace = compile_trace(scenario_from_dict(sc))
    hw = load_hardware("cpu-base")
    runs = {c: simulate(trace, engine, dataclasses.replace(hw, kv_shared_cost=c), "tiny-llama", over, context=8192)
            for c in (0.0, 1.0)}
    e2e = {c: float((r.requests["last_token_s"] - r.requests["send_s"]).median()) for c, r in runs.items()}
    assert e2e[0.0] < e2e[1.0]


def _light_trace():
    from scenarios import compile_trace, scenario_from_dict
    sc = {"name": "s", "seed": 2, "duration_s": 30.0, "arrivals": {"kind": "gamma", "rate": 0.1, "cv": 1.0},
          "prompts": {"length": 1024, "sharing": 0.5, "vocab_low": 2, "vocab_high": 4096},
          "outputs": {"planner": 8, "worker": 8, "aggregator": 8}}
    return compile_trace(scenario_from_dict(sc))


def _with_request_latency(hw, family: str, seconds: float):
    import dataclasses
    ovh = dataclasses.replace(hw.overhead(family), request_s=seconds)
    return dataclasses.replace(hw, overheads={**hw.overheads, family: ovh})


@pytest.mark.parametrize("engine,family,over", [("vllm-v1", "vllm-v1", {"block_size": 32}),
                                                ("sglang-current", "sglang", {"max_total_tokens": 65536})])
def test_request_latency_delays_requests_not_steps(engine, family, over):
    """The front end's per-request latency adds to each request's TTFT and E2E; the engine's steps (its
    busy time) are unchanged. A request timing out while still in the front end is failed cleanly."""
    from simulator.simulate import simulate
    trace, hw = _light_trace(), load_hardware("cpu-base")
    base = simulate(trace, engine, hw, "tiny-llama", over, context=8192, check_every=1)
    late = simulate(trace, engine, _with_request_latency(hw, family, 0.02), "tiny-llama", over, context=8192,
                    check_every=1)
    ttft = {k: (r.requests["first_token_s"] - r.requests["send_s"]) for k, r in (("base", base), ("late", late))}
    shift = (ttft["late"] - ttft["base"]).median()
    assert shift == pytest.approx(0.02, abs=1e-3)
    assert late.meta["busy_s"] == pytest.approx(base.meta["busy_s"], rel=0.02)
    lost = simulate(trace, engine, _with_request_latency(hw, family, 5.0), "tiny-llama", over, context=8192,
                    timeout_s=1.0)
    assert (lost.requests["error"] == "timeout").all()
