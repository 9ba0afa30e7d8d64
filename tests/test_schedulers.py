"""Hand-checked scenarios, one per engine rule."""

from __future__ import annotations

import math

import numpy as np

from simulator.schedulers.sglang import SglangScheduler
from simulator.schedulers.vllm_v0 import VllmV0Scheduler
from simulator.schedulers.vllm_v1 import VllmV1Scheduler
from tests.helpers import config, request


def run_until_token(s, r, t=0.0, max_steps=50):  # type: ignore[no-untyped-def]
    steps = []
    for k in range(max_steps):
        st = s.schedule(t, k)
        steps.append(st)
        s.complete(st, t + 1, k)
        s.check_integrity()
        t += 1
        if r.output_len:
            return steps
    raise AssertionError("no token")


def test_vllm_v0_prefill_only_step_stalls_decodes():
    s = VllmV0Scheduler(config("vllm-0.6.3", enable_prefix_caching=True))
    a = request(0, 500, max_tokens=10)
    s.add(a, 0)
    run_until_token(s, a)
    st = s.schedule(1, 1)
    assert st.kind == "decode" and [r for r, _ in st.items] == [a]
    s.complete(st, 2, 1)
    b = request(1, 800)
    s.add(b, 2)
    st = s.schedule(2, 2)
    assert st.kind == "prefill" and [r for r, _ in st.items] == [b]       # a sits this step out
    assert st.shape.decodes == 0


def test_vllm_v0_never_fitting_prompt_is_ignored():
    s = VllmV0Scheduler(config("vllm-0.6.3", num_gpu_blocks=100))
    big, small = request(0, 1590), request(1, 16)      # big needs 100 blocks > total − watermark(1)
    s.add(big, 0)
    s.add(small, 0)
    st = s.schedule(0, 0)
    assert big.error and [r for r, _ in st.items] == [small]


def test_vllm_v0_head_of_line_blocking():
    s = VllmV0Scheduler(config("vllm-0.6.3", num_gpu_blocks=100))
    a = request(0, 1000, max_tokens=50)             # 63 blocks
    s.add(a, 0)
    s.complete(s.schedule(0, 0), 1, 0)
    big, small = request(1, 800), request(2, 16)    # big (50 blocks) must wait; small would fit
    s.add(big, 1)
    s.add(small, 1)
    st = s.schedule(1, 1)
    assert st.kind == "decode" and list(s.waiting) == [big, small]


def test_chunked_4096_prompt_under_2048_budget_takes_two_steps():
    for s in (VllmV0Scheduler(config("vllm-0.6.3", enable_chunked_prefill=True, max_num_batched_tokens=2048)),
              VllmV1Scheduler(config("vllm-v1", max_num_batched_tokens=2048)),
              SglangScheduler(config("sglang-0.4.1", chunked_prefill_size=2048))):
        r = request(0, 4096)
        s.add(r, 0)
        steps = run_until_token(s, r)
        assert [sum(n for _, n in st.items) for st in steps] == [2048, 2048], type(s).__name__


def test_vllm_v0_chunked_cuts_at_most_one_new_request():
    s = VllmV0Scheduler(config("vllm-0.6.3", enable_chunked_prefill=True, max_num_batched_tokens=2048,
                               enable_prefix_caching=True))
    rs = [request(i, 700) for i in range(4)]
    for r in rs:
        s.add(r, 0)
    st = s.schedule(0, 0)
    assert [n for _, n in st.items] == [700, 700, 640]      # third cut to whole blocks; fourth waits
    assert rs[3] in s.waiting


def test_vllm_hits_skip_compute_not_budget():
    s = VllmV0Scheduler(config("vllm-0.6.3", enable_prefix_caching=True))
    a = request(0, 1000, max_tokens=1, shared=960)
    s.add(a, 0)
    run_until_token(s, a)
    b = request(1, 1000, max_tokens=1, shared=960)
    s.add(b, 5)
    st = s.schedule(5, 5)
    assert st.items == [(b, 1000)]                  # budget counts the whole prompt
    assert st.shape.prefill_tokens == 1000 - 960     # compute skips the 60 cached blocks


def test_sglang_lpm_admits_longest_cached_prefix_first():
    s = SglangScheduler(config("sglang-0.4.1", chunked_prefill_size=600))
    warm = request(0, 1000, max_tokens=1, shared=900)
    s.add(warm, 0)
    run_until_token(s, warm)
    assert s.schedule(9, 9) is None          # idle: releases the finished request (overlap: one step late)
    cold = request(1, 500)
    hot = request(2, 1000, shared=900)
    s.add(cold, 10)
    s.add(hot, 10)
    st = s.schedule(10, 10)
    assert st.items[0][0] is hot and st.items[0][1] == 100      # only the 100 uncached tokens
    assert hot.cached_tokens == 900


def test_sglang_fcfs_keeps_arrival_order():
    s = SglangScheduler(config("sglang-0.4.1", chunked_prefill_size=600, schedule_policy="fcfs"))
    warm = request(0, 1000, max_tokens=1, shared=900)
    s.add(warm, 0)
    run_until_token(s, warm)
    cold, hot = request(1, 500), request(2, 1000, shared=900)
    s.add(cold, 10)
    s.add(hot, 10)
    st = s.schedule(10, 10)
    assert st.items[0][0] is cold


def test_sglang_prefill_has_priority_over_decode():
    s = SglangScheduler(config("sglang-0.4.1"))
    a, b = request(0, 300, max_tokens=50), request(1, 300, max_tokens=50)
    s.add(a, 0)
    s.complete(s.schedule(0, 0), 1, 0)
    s.complete(s.schedule(1, 1), 2, 1)
    s.add(b, 1.5)                              # arrives while the batch scheduled at t=1 runs
    st = s.schedule(2, 2)
    assert st.kind == "decode" and b not in s.waiting   # overlap: not seen until the next batch
    s.complete(st, 3, 2)
    st = s.schedule(3, 3)
    assert st.kind == "prefill" and [r for r, _ in st.items] == [b]   # prefill first: the decode batch waits


def test_sglang_retracts_fewest_outputs_to_the_tail():
    s = SglangScheduler(config("sglang-0.4.1", max_total_tokens=2000, new_token_ratio_decay_steps=1))
    rs = [request(0, 200, max_tokens=50)] + [request(i, 200, max_tokens=600) for i in range(1, 8)]
    for r in rs:
        s.add(r, 0)
    t = 0
    while True:
        outs = {id(r): r.output_len for r in s.running}
        before = s.counters.preemptions
        st = s.schedule(t, t)
        if s.counters.preemptions > before:
            gone = [r for r in rs if id(r) in outs and r in s.waiting]
            kept = [r for r in s.running]
            assert gone and kept
            assert max(outs[id(r)] for r in gone) <= min(outs[id(r)] for r in kept)
            assert {id(r) for r in list(s.waiting)[-len(gone):]} == {id(r) for r in gone}   # to the tail
            assert all(r.num_computed == 0 and r.output_len > 0 for r in gone)
            break
        s.complete(st, t + 1, t)
        s.check_integrity()
        t += 1
        assert t < 3000


def test_vllm_v0_preempts_last_running_by_recompute():
    s = VllmV0Scheduler(config("vllm-0.6.3", num_gpu_blocks=40))
    a, b = request(0, 300, max_tokens=200), request(1, 300, max_tokens=200)
    s.add(a, 0)
    s.add(b, 0)
    t = 0
    while not s.counters.preemptions:
        st = s.schedule(t, t)
        s.complete(st, t + 1, t)
        s.check_integrity()
        t += 1
    assert s.waiting[0] is b and b.num_computed == 0 and b.output_len > 0
    assert a in s.running


def test_preemption_victim_is_chosen_by_name():
    """``preemption_victim`` is a what-if knob: vLLM's ``newest`` takes the last running request (above); ``oldest``
    on the same workload takes the first, and the chooser names what it knows when asked for what it does not."""
    import pytest

    from simulator.schedulers.victims import fewest_decoded, get_victim, most_kv
    for preset, cls in (("vllm-0.6.3", VllmV0Scheduler), ("vllm-v1", VllmV1Scheduler)):
        taken = {}
        for victim in ("newest", "oldest"):
            s = cls(config(preset, num_gpu_blocks=60, preemption_victim=victim, enable_prefix_caching=False))
            rs = [request(i, 300, max_tokens=200) for i in range(3)]
            for r in rs:
                s.add(r, 0)
            t = 0
            while not s.counters.preemptions:
                st = s.schedule(t, t)
                if st is not None:
                    s.complete(st, t + 1, t)
                s.check_integrity()
                t += 1
            taken[victim] = [r.idx for r in s.waiting]
        # request 0 grows first and needs a block: newest takes 2, oldest the first not yet scheduled (1)
        assert taken == {"newest": [2], "oldest": [1]}, (preset, taken)
    x, y, z = request(0, 100, max_tokens=9), request(1, 300, max_tokens=9), request(2, 200, max_tokens=9)
    x.output_len, y.output_len, z.output_len = 3, 1, 1
    x.num_computed, y.num_computed, z.num_computed = 102, 300, 200
    assert fewest_decoded([x, y, z]) == 1                        # fewest outputs, then the longest prompt
    assert most_kv([x, y, z]) == 1
    with pytest.raises(KeyError, match="known: newest"):
        get_victim("random")


def test_vllm_v1_no_admission_in_a_step_that_preempted():
    s = VllmV1Scheduler(config("vllm-v1", num_gpu_blocks=40, enable_prefix_caching=False))
    a, b = request(0, 300, max_tokens=300), request(1, 300, max_tokens=300)
    s.add(a, 0)
    s.add(b, 0)
    t = 0
    c = request(2, 16)
    added = False
    while True:
        if not added and t > 2:
            s.add(c, t)
            s.add(request(3, 16), t)
            added = True
        before = s.counters.preemptions
        last = s.running[-1] if s.running else None
        waiting_before = list(s.waiting)
        st = s.schedule(t, t)
        if s.counters.preemptions > before:
            assert all(r not in waiting_before for r, _ in st.items)   # nobody admitted this step
            assert s.waiting[0] is last                               # running[-1] went to the front
            break
        s.complete(st, t + 1, t)
        s.check_integrity()
        t += 1
        assert t < 500


def test_sglang_ratio_decays_and_resets():
    s = SglangScheduler(config("sglang-0.4.1"))
    a = request(0, 100, max_tokens=50)
    s.add(a, 0)
    t = 0
    while not a.is_finished:
        st = s.schedule(t, t)
        s.complete(st, t + 1, t)
        t += 1
    assert s.ratio < s.init_ratio
    assert np.isclose(s.init_ratio - s.ratio, s.decay * (a.max_tokens - 1), rtol=0.05)
    s.schedule(t, t)
    s.schedule(t + 1, t + 1)
    assert s.ratio == s.init_ratio


def test_sglang_inline_forward_streams_a_batch_after_the_next_one():
    """On a CPU (forward_stream: inline) an iteration runs batch N+1, then processes batch N: a prefill's
    first token reaches the client when the following decode ends; arrivals during a batch are seen by
    the next one; with nothing left to run, results go out at once."""
    s = SglangScheduler(config("sglang-current", forward_stream="inline"))
    a, b = request(0, 300, max_tokens=3), request(1, 300, max_tokens=50)
    s.add(a, 0)
    st = s.schedule(0, 0)
    assert st.kind == "prefill"
    assert s.complete(st, 1, 0) == [] and a.output_len == 1
    s.add(b, 0.5)                                   # arrived while the prefill ran
    st = s.schedule(1, 1)
    assert st.kind == "prefill" and [r for r, _ in st.items] == [b]    # seen at once (no N+2 delay)
    s.complete(st, 2, 1)
    assert a.first_token_s == 2                     # a's token went out after b's prefill
    st = s.schedule(2, 2)
    assert st.kind == "decode" and {r.idx for r, _ in st.items} == {0, 1}
    assert s.complete(st, 3, 2) == [] and b.first_token_s == 3
    st = s.schedule(3, 3)                           # a finishes in this decode …
    assert s.complete(st, 4, 3) == [] and a.is_finished and a.last_token_s == 4
    st = s.schedule(4, 4)                           # … and is reported when the next one ends
    assert [r.idx for r, _ in st.items] == [1]      # 0.5: not given a slot in that decode
    assert s.complete(st, 5, 4) == [a] and a.last_token_s == 5
    s.check_integrity()
    c = SglangScheduler(config("sglang-current", forward_stream="inline"))
    d = request(2, 300, max_tokens=1)
    c.add(d, 0)
    assert c.complete(c.schedule(0, 0), 1, 0) == []
    assert c.schedule(1, 1) is None and c.flush(1) == [d] and d.first_token_s == 1   # idle: at once


def test_sglang_device_stream_streams_each_batch_at_its_end():
    s = SglangScheduler(config("sglang-current"))
    assert s.cfg.forward_stream == "device"          # a CUDA profile
    a = request(0, 300, max_tokens=2)
    s.add(a, 0)
    s.complete(s.schedule(0, 0), 1, 0)
    assert a.first_token_s == 1
    old = SglangScheduler(config("sglang-0.4.1"))
    x, y = request(0, 300, max_tokens=2), request(1, 300, max_tokens=9)
    for r in (x, y):
        old.add(r, 0)
    old.complete(old.schedule(0, 0), 1, 0)
    old.complete(old.schedule(1, 1), 2, 1)          # x finishes here
    assert old.schedule(2, 2).shape.decodes == 2    # 0.4.1: the finished x still rides this decode


def test_sglang_overlap_puts_a_prompt_in_the_tree_when_its_results_are_processed():
    """Overlap (either stream): batch N+1 is scheduled before batch N's results are processed, so a request
    scheduled into N+1 does not match the prompt N prefilled; one scheduled after N+1 does. Without overlap it
    matches at once. (Live: of three planners sent within 0.11 s, the two sent while the first prefilled reported 0
    cached tokens.)"""
    def cached_after(preset: str, **over):  # type: ignore[no-untyped-def]
        s = SglangScheduler(config(preset, **over))
        a, b, c = (request(i, 400, max_tokens=8, shared=300) for i in range(3))
        s.add(a, 0)
        st = s.schedule(0, 0)
        s.add(b, 0.5)                                # arrives while a's prefill runs
        s.complete(st, 1, 0)
        st = s.schedule(1, 1)                        # b is scheduled into the batch after a's
        assert [r for r, _ in st.items] == [b]
        s.complete(st, 2, 1)                         # a's results processed (overlap) at this batch's end
        s.add(c, 2)
        st = s.schedule(2, 2)
        assert [r for r, _ in st.items] == [c]
        s.complete(st, 3, 2)
        s.check_integrity()
        return b.cached_tokens, c.cached_tokens

    assert cached_after("sglang-current", forward_stream="inline") == (0, 300)
    assert cached_after("sglang-current", forward_stream="inline", disable_overlap_schedule=True) == (300, 300)


def test_sglang_a_deferred_prompt_keeps_its_decode_slot_and_frees_its_duplicates():
    """A request decoding before its prompt enters the tree keeps that slot private; its copy of a prefix
    another request inserted first is freed when it is inserted."""
    s = SglangScheduler(config("sglang-current", forward_stream="inline"))
    a, b = request(0, 400, max_tokens=8, shared=300), request(1, 400, max_tokens=8, shared=300)
    s.add(a, 0)
    s.add(b, 0)
    st = s.schedule(0, 0)
    assert [r for r, _ in st.items] == [a, b] and b.cached_tokens == 0   # both computed in full
    s.complete(st, 1, 0)
    free = s.available
    st = s.schedule(1, 1)                            # a decode: one slot each, prompts not yet inserted
    assert st.kind == "decode" and s.available == free - 2
    s.complete(st, 2, 1)                             # results processed: b's 300 duplicate slots freed
    s.check_integrity()
    assert s.available == free - 2 + 300
    assert a.engine.kv_len == 401 and a.engine.prefix_len == 400


def _step(s, t):  # type: ignore[no-untyped-def]
    st = s.schedule(t, t)
    s.complete(st, t + 1, t)
    s.check_integrity()
    return st


def test_sglang_decode_that_fits_with_evictable_cache_is_never_retracted():
    """``check_decode_mem`` (0.4.1 schedule_batch.py): a decode batch short of free slots evicts unlocked
    radix-cache leaves first; it retracts only when free + evictable slots cannot hold one token per
    request."""
    s = SglangScheduler(config("sglang-0.4.1", max_total_tokens=1000, disable_overlap_schedule=True))
    done = request(0, 600, max_tokens=2)
    s.add(done, 0)
    t = 0
    while not done.is_finished:
        _step(s, t)
        t += 1
    assert s.tree.evictable_size >= 600 and s.available < 400      # its prompt is cached, unlocked
    runners = [request(i, 150, max_tokens=200) for i in (1, 2)]
    for r in runners:
        s.add(r, t)
    while any(not r.is_finished for r in runners):
        _step(s, t)
        t += 1
        assert t < 1000
    assert s.counters.preemptions == 0
    assert s.tree.match_prefix(done.tokens(600), t)[0] < 600           # it evicted instead


def test_sglang_admission_reserves_what_0_4_1_reserves():
    """``PrefillAdder`` (0.4.1 schedule_policy.py): the budget is free + evictable slots minus, per running
    request, min(max_new_tokens − outputs, 4096) × new_token_ratio; a request needs its extend length plus
    min(max_new_tokens, 4096) strictly below what is left."""
    s = SglangScheduler(config("sglang-0.4.1", max_total_tokens=2000, disable_overlap_schedule=True))
    a = request(0, 500, max_tokens=1000)
    s.add(a, 0)
    _step(s, 0)
    assert a in s.running and s.ratio == s.init_ratio
    left = s.available + s.tree.evictable_size - min(a.max_tokens - a.output_len, 4096) * s.ratio
    need = math.ceil(left)                     # extend + max_new at the budget: refused
    too_big = request(2, need - 10, max_tokens=10)
    s.add(too_big, 1)
    st = s.schedule(1, 1)
    assert st.kind == "decode" and too_big in s.waiting and s.batch_is_full
    s.abort(too_big, 1)
    s.complete(st, 2, 1)
    s.batch_is_full = False                    # as when a request leaves
    left = s.available + s.tree.evictable_size - min(a.max_tokens - a.output_len, 4096) * s.ratio
    b = request(1, math.ceil(left) - 1 - 10, max_tokens=10)     # one token under: admitted
    s.add(b, 2)
    st = s.schedule(2, 2)
    assert st.kind == "prefill" and [r for r, _ in st.items] == [b]


def _admission_after_a_finish(overlap: bool, preset: str = "sglang-0.4.1") -> tuple[int, int, bool]:
    """a runs; b and c arrive together, b is admitted and c meets NO_TOKEN. Returns the step a's last token was
    made in, the step c's prefill runs in, and whether the budget had room for c right after b's prefill."""
    s = SglangScheduler(config(preset, max_total_tokens=2000, chunked_prefill_size=4096,
                               disable_overlap_schedule=not overlap))
    a, b, c = request(0, 300, max_tokens=40), request(1, 600, max_tokens=500), request(2, 500, max_tokens=100)
    s.add(a, 0)
    finished_at = admitted_at = -1
    room_after_b = False
    for t in range(80):
        if t == 5:
            s.add(b, t)
            s.add(c, t)
        st = s.schedule(t, t)
        if st.kind == "prefill" and c in [r for r, _ in st.items]:
            admitted_at = t
            break
        s.complete(st, t + 1, t)
        if b in s.running and not room_after_b and not s.being_chunked:
            left = s.available + s.tree.evictable_size - s._reserved_for_running()
            room_after_b = c.fill_len + c.max_tokens < left
        if a.is_finished and finished_at < 0:
            finished_at = t
    return finished_at, admitted_at, room_after_b


def test_sglang_a_full_batch_waits_for_the_filter_to_see_a_finish():
    """0.4.1 ``get_next_batch_to_run``: after a NO_TOKEN, ``batch_is_full`` is reset only when a chunked request
    leaves the prefill batch, or when ``update_running_batch``'s ``filter_batch`` sees the running batch shrink —
    not after every prefill, although the admitted requests' reservation shrinks to ``new_token_ratio``× once they
    run. The filter sees a finish at the next decode; with overlap one decode later (the finished request rides
    one more step before its result is processed)."""
    done, admitted, room = _admission_after_a_finish(overlap=False)
    assert room and done > 6 and admitted == done + 2
    done, admitted, room = _admission_after_a_finish(overlap=True)
    assert room and admitted == done + 3


def test_sglang_current_sees_a_finish_one_decode_sooner():
    """0.5.23 ``scheduler.py``: ``get_next_batch_to_run`` filters the running batch at every step, before the
    prefill is tried, and ``update_running_batch`` leaves a request its in-flight token finishes out of the next
    decode (``_reqs_finishing_inflight``): with overlap the flag clears at the next decode, without at once."""
    done, admitted, room = _admission_after_a_finish(overlap=False, preset="sglang-current")
    assert room and admitted == done + 1
    done, admitted, room = _admission_after_a_finish(overlap=True, preset="sglang-current")
    assert room and admitted == done + 2


def test_schedulers_come_from_the_registry_by_engine_family():
    from types import SimpleNamespace

    import pytest as _pytest

    from simulator.schedulers.registry import SCHEDULERS, make_scheduler
    assert set(SCHEDULERS) == {"vllm-v0", "vllm-v1", "sglang"}
    assert all(cls.family == fam for fam, cls in SCHEDULERS.items())
    with _pytest.raises(KeyError, match="no scheduler; known"):
        make_scheduler(SimpleNamespace(family="trt-llm"))


def _warm_prefix(s: SglangScheduler) -> None:
    """A finished request leaves its 1,000 tokens (the first 900 shared by every ``shared=900`` request) in the tree."""
    warm = request(0, 1000, max_tokens=1, shared=900)
    s.add(warm, 0)
    run_until_token(s, warm)
    assert s.schedule(9, 9) is None          # idle: releases the finished request (overlap: one step late)


def test_sglang_admission_takes_the_priority_pass_match():
    """0.4.1 ``get_new_batch_prefill``: ``calc_priority`` matches every waiting request under LPM (touching its path),
    and admission then takes that match (``init_next_round_input(None)``: ``prefix_computed``) without matching, so
    touching, again; under FCFS nothing is matched before admission, which matches each request it tries. 0.5.23
    matches every request admission tries (``init_next_round_input(self.tree_cache)``), after LPM's own match too."""
    for preset, policy, passes in (("sglang-0.4.1", "lpm", 1), ("sglang-0.4.1", "fcfs", 1),
                                   ("sglang-current", "lpm", 2), ("sglang-current", "fcfs", 1)):
        s = SglangScheduler(config(preset, schedule_policy=policy))
        _warm_prefix(s)
        hot = [request(1, 1000, shared=900), request(2, 1000, shared=900)]
        nodes = 0
        for split in (True, False):          # the first match splits the warm node at 900; then the paths stand
            for r in hot:
                path: list = []
                s.tree.match_prefix(r.tokens(r.fill_len), 10, r.fill_len - 1, None, path)
                nodes += 0 if split else len(path)
        for r in hot:
            s.add(r, 10)
        clock = s.tree._clock
        st = s.schedule(10, 10)
        assert [r for r, _ in st.items] == hot and all(r.cached_tokens == 900 for r in hot)
        assert s.tree._clock - clock == passes * nodes, (preset, policy)      # each request's path, each pass


def test_sglang_a_step_the_chunked_request_fills_still_orders_and_offers_the_queue():
    """0.4.1 ``get_new_batch_prefill`` runs ``calc_priority`` whenever prefill is tried, also when the request being
    chunked takes the whole chunk: the queue is sorted (LPM) and its head offered to ``add_one_req``, whose budget
    check marks the batch full (NO_TOKEN) before a chunk of 0 tokens would be refused (OTHER)."""
    s = SglangScheduler(config("sglang-0.4.1", chunked_prefill_size=256, max_total_tokens=3000,
                               disable_overlap_schedule=True))
    _warm_prefix(s)
    long = request(3, 1024)                  # cold: chunked 256 at a time
    s.add(long, 10)
    st = s.schedule(10, 10)
    assert st.items == [(long, 256)] and s.being_chunked is long
    cold, hot = request(4, 1500, max_tokens=900), request(5, 1000, max_tokens=2500, shared=900)
    s.add(cold, 10.5)
    s.add(hot, 10.5)
    s.complete(st, 11, 10)
    st = s.schedule(11, 11)
    assert st.items == [(long, 256)]                          # the chunk is full: nothing else fits in it
    assert list(s.waiting) == [hot, cold]                    # yet the queue was ordered by match length
    assert s.batch_is_full                                   # and its head (100 + 2,500 ≥ what is left) refused


def test_sglang_an_admission_that_spends_the_budget_marks_the_batch_full():
    """0.4.1 ``add_one_req`` returns ``budget_state()`` after adding a request: NO_TOKEN once ``rem_total_tokens``
    (or ``cur_rem_tokens``) is spent, and the scheduler marks the batch full — as for a request refused."""
    s = SglangScheduler(config("sglang-0.4.1", max_total_tokens=3000, disable_overlap_schedule=True))
    _warm_prefix(s)                          # 1,000 evictable tokens; 900 of them the hot request's prefix
    hot = request(1, 1000, max_tokens=2000, shared=900)     # 100 + 2,000 = 3,000 − the 900 its lock protects
    s.add(hot, 10)
    st = s.schedule(10, 10)
    assert st.items == [(hot, 100)] and s.batch_is_full
