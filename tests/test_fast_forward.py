"""Decode fast-forward changes nothing but speed: on random scenarios, for every preset, the per-request times,
every token's time, the step count, the telemetry series and summary are those of the step-by-step reference mode
(`--no-fast-forward`), and runs were actually taken where a family implements them."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scenarios import compile_trace, scenario_from_dict
from simulator import simulate
from simulator.cluster import ClusterSpec
from simulator.cluster_run import simulate_cluster
from tests.helpers import in_pure_process

PRESETS = [("vllm-0.6.3", {"enable_prefix_caching": True}), ("vllm-0.6.3", {}),
           ("vllm-0.6.3", {"enable_prefix_caching": True, "enable_chunked_prefill": True,
                           "max_num_batched_tokens": 2048}),
           ("vllm-v1", {}), ("sglang-0.4.1", {"mem_fraction_static": 0.85}),
           ("sglang-0.4.1", {"disable_overlap_schedule": True, "chunked_prefill_size": 1024}),
           ("sglang-current", {"mem_fraction_static": 0.85})]


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    cols = ["send_s", "first_token_s", "last_token_s", "output_tokens", "cached_tokens"]
    np.testing.assert_allclose(a.requests[cols].to_numpy(float), b.requests[cols].to_numpy(float), rtol=1e-9)
    assert a.requests["error"].tolist() == b.requests["error"].tolist()
    np.testing.assert_allclose(a.chunks["t_s"].to_numpy(), b.chunks["t_s"].to_numpy(), rtol=1e-9)
    pd.testing.assert_frame_equal(a.telemetry, b.telemetry, rtol=1e-9)
    sa, sb = a.meta["telemetry_summary"], b.meta["telemetry_summary"]
    assert sa.keys() == sb.keys() and all(np.isclose(sa[k], sb[k], rtol=1e-9) for k in sa), (sa, sb)
    assert sa["steps"] == sb["steps"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preset=st.sampled_from(range(len(PRESETS))), rate=st.sampled_from([0.05, 0.2, 0.5, 1.0]),
       length=st.sampled_from([512, 2048, 4096]), sharing=st.sampled_from([0.0, 0.5, 0.9]),
       out=st.integers(8, 200), seed=st.integers(0, 50))
def test_fast_forward_gives_the_step_by_step_results(preset, rate, length, sharing, out, seed):
    engine, over = PRESETS[preset]
    t = compile_trace(scenario_from_dict({
        "duration_s": 120, "seed": seed, "arrivals": {"rate": rate}, "prompts": {"length": length, "sharing": sharing},
        "outputs": {"planner": out, "worker": out, "aggregator": 2 * out}}))
    ref = simulate(t, engine, overrides=over, fast_forward=False, record_tokens=True, check_every=7)
    ff = simulate(t, engine, overrides=over, record_tokens=True, check_every=7)
    _same(ref, ff)


def test_runs_are_taken_on_the_study_workload():
    in_pure_process("tests.test_fast_forward:runs_are_taken")      # it counts the runs by patching the replica


def runs_are_taken() -> None:
    from simulator.engine import Replica
    taken: list[int] = []
    orig = Replica._take_run

    def counting(self):  # type: ignore[no-untyped-def]
        run = orig(self)
        taken.append(int(run is not None))
        return run
    Replica._take_run = counting  # type: ignore[method-assign]
    t = compile_trace(scenario_from_dict({"duration_s": 200, "arrivals": {"rate": 0.28},
                                          "prompts": {"length": 4096, "sharing": 0.9}}))
    for engine, over in PRESETS[0], PRESETS[3], PRESETS[4]:
        taken.clear()
        ref = simulate(t, engine, overrides=over, fast_forward=False)
        assert not taken
        ff = simulate(t, engine, overrides=over)
        assert sum(taken) > 20, engine
        assert ref.meta["telemetry_summary"]["steps"] == ff.meta["telemetry_summary"]["steps"]


def test_a_cluster_fast_forwards_to_the_same_results():
    t = compile_trace(scenario_from_dict({"duration_s": 150, "arrivals": {"rate": 0.8},
                                          "prompts": {"length": 2048, "sharing": 0.9, "prefix_groups": 3}}))
    for router in ("round_robin", "cache_aware", "scored"):
        spec = ClusterSpec(("sglang-0.4.1", "vllm-0.6.3", "sglang-0.4.1"), router)
        ref = simulate_cluster(t, spec, fast_forward=False, record_tokens=True)
        ff = simulate_cluster(t, spec, record_tokens=True)
        assert ref.requests["replica"].tolist() == ff.requests["replica"].tolist()
        _same(ref, ff)


def test_a_runs_step_times_priced_at_once_are_bit_identical_to_one_step_at_a_time():
    from simulator.cost_model import BatchShape, CostModel
    from simulator.profiles import load_hardware, load_model
    rng = np.random.default_rng(0)
    for hw in ("l4", "a100-80g", "h100", "cpu-base"):
        for family in ("vllm-v0", "vllm-v1", "sglang"):
            for tp in (1, 2):
                cm = CostModel(load_hardware(hw), load_model("llama-3.1-8b"), family, tp, graph_max_bs=8)
                for n in (1, 8, 9, 64):
                    ctx = rng.integers(n, 10**6, 40)
                    distinct = np.array([rng.choice([-1, int(rng.integers(0, c)), int(c), int(c) + 5]) for c in ctx])
                    got = cm.decode_step_times(n, ctx.tolist(), distinct.tolist())
                    want = [cm.step_time(BatchShape(decodes=n, decode_ctx=int(c), decode_distinct=int(d)))
                            for c, d in zip(ctx, distinct, strict=True)]
                    assert got == want, (hw, family, tp, n)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 700), min_size=1, max_size=12), blocks=st.integers(60, 400),
       chunks=st.lists(st.tuples(st.integers(1, 90), st.integers(1, 40)), min_size=1, max_size=5))
def test_a_block_runs_states_count_each_steps_blocks_as_the_direct_sum(lengths, blocks, chunks):
    """BlockDecodeRun counts the blocks step i takes by residue class; the direct sum over requests and steps gives
    the same free blocks, distinct KV tokens and usage, and the same step at which the reserve would be broken,
    whatever steps are asked for and in what order."""
    from simulator.schedulers.vllm_v0 import VllmV0Scheduler
    from tests.helpers import config, request
    s = VllmV0Scheduler(config("vllm-0.6.3", num_gpu_blocks=blocks, block_size=16))
    reqs = [request(i, n, max_tokens=200) for i, n in enumerate(lengths)]
    for r in reqs:
        s.add(r, 0.0)
    t = 0.0
    while any(r.in_prefill for r in s.running) or s.waiting:
        st_ = s.schedule(t, int(t))
        if st_ is None:
            break
        s.complete(st_, t + 1, int(t))
        t += 1
    plan = s.decode_run()
    if plan is None:
        return
    bs, nb, free0 = s.cache.block_size, s.cache.num_blocks, s.cache.num_free
    fill0 = np.array([r.fill_len for r in plan.reqs])
    blocks0 = np.array([r.engine.num_blocks for r in plan.reqs])
    for i, m in chunks:
        steps = np.arange(i, min(i + m, plan.steps + 1))[:, None]
        need = np.maximum(-(-(fill0[None, :] + steps - 1) // bs) - blocks0[None, :], 0).sum(axis=1)
        free = free0 - need
        k = int(np.argmin(free >= plan.reserve)) if not (free >= plan.reserve).all() else len(free)
        distinct, usage = plan.states(i, m)
        assert distinct == ((nb - free[:k]) * bs).tolist()
        assert usage == (1.0 - free[:k] / nb).tolist()
