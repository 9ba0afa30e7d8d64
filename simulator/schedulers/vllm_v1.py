"""vLLM V1 scheduler (0.33.0): one token budget shared by decodes and prefill chunks.

RUNNING requests first, in list order, each taking min(remaining, budget, long-prefill threshold);
if its blocks cannot be allocated, ``running[-1]`` is preempted by recompute (prepended to ``waiting``)
until it fits or it is itself the victim. WAITING requests are admitted only when nobody was preempted
this step, while budget and ``max_num_seqs`` allow: the prefix-cache hit (whole blocks, capped at
prompt length − 1) counts as computed and uses no budget; the whole prompt must fit
(``scheduler_reserve_full_isl``); the first request that does not fit stops admission.
Blocks are cached as soon as they are scheduled (a later request in the same step can hit them).
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from simulator.block_cache import BlockCache, evictable_among, share_hits
from simulator.config import VllmV1Config
from simulator.cost_model import BatchShape
from simulator.request import Request
from simulator.schedulers.base import BlockDecodeRun, BlockSchedulerBase, Step
from simulator.schedulers.policies import get_ordering
from simulator.schedulers.victims import get_victim


class VllmV1Scheduler(BlockSchedulerBase):
    family: ClassVar[str] = "vllm-v1"

    def __init__(self, cfg: VllmV1Config):
        super().__init__()
        assert cfg.num_gpu_blocks and cfg.max_num_batched_tokens and cfg.max_num_seqs and cfg.max_model_len
        self.cfg = cfg
        self.cache = BlockCache(cfg.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching, "v1")
        self.watermark_blocks = int(cfg.watermark * cfg.num_gpu_blocks)
        self.order = get_ordering(cfg.scheduling_policy)
        self.choose_victim = get_victim(cfg.preemption_victim)
        self.max_seqs = cfg.max_num_seqs

    def _hit_blocks(self, r: Request) -> int:
        if not self.cache.prefix_caching:
            return 0
        cap = (r.fill_len - 1) // self.cache.block_size
        return min(self.cache.lookup_hit_blocks(r, r.fill_len), cap)

    def _grow(self, r: Request, n_new: int, now: float) -> None:
        self.cache.append_slot(r, r.num_computed + n_new, 0, now)
        self.cache.promote_full_blocks(r, r.num_computed + n_new, 0, now)

    def _can_grow(self, r: Request, n_new: int) -> bool:
        need = self.cache.blocks_for(r.num_computed + n_new) - r.engine.num_blocks
        return need <= self.cache.num_free

    def _preempt(self, victim: Request, now: float) -> None:
        self.cache.free(victim, now)
        victim.reset_for_recompute()
        self.counters.preemptions += 1

    def _victim(self, at: int) -> Request:
        """``preemption_victim`` among ``running[at + 1:]``, the requests this step has yet to schedule, else the
        request at ``at`` itself (vLLM's: ``self.running.pop()``, which is that request when it is the last)."""
        if at + 1 == len(self.running):
            return self.running.pop()
        return self.running.pop(at + 1 + self.choose_victim(self.running[at + 1:]))

    def _schedule_running(self, budget: int, now: float, shape: BatchShape,
                          items: list[tuple[Request, int]]) -> tuple[int, list[Request]]:
        preempted: list[Request] = []
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = min(r.remaining_prefill, budget)
            if self.cfg.long_prefill_token_threshold:
                n = min(n, self.cfg.long_prefill_token_threshold)
            if n <= 0:
                i += 1
                continue
            scheduled = True
            while not self._can_grow(r, n):
                victim = self._victim(i)
                self._preempt(victim, now)
                preempted.append(victim)
                if victim is r:
                    scheduled = False
                    break
            if not scheduled:
                break
            self._grow(r, n, now)
            self._add_item(r, n, shape, items)
            budget -= n
            i += 1
        return budget, preempted

    def _add_item(self, r: Request, n: int, shape: BatchShape, items: list[tuple[Request, int]]) -> None:
        if r.in_prefill:
            shape.add_prefill(n, r.num_computed, r.num_computed + n >= r.fill_len)
        else:
            shape.add_decode(r.context_len)
        items.append((r, n))

    def _schedule_waiting(self, budget: int, now: float, shape: BatchShape,
                          items: list[tuple[Request, int]]) -> None:
        if self.cfg.scheduling_policy != "fcfs" and len(self.waiting) > 1:
            bs = self.cache.block_size
            self.waiting = deque(self.order(list(self.waiting), lambda r: self._hit_blocks(r) * bs))
        max_seqs, max_len = self.cfg.max_num_seqs or 0, self.cfg.max_model_len or 0
        while self.waiting and budget > 0 and len(self.running) < max_seqs:
            r = self.waiting[0]
            if r.fill_len > max_len:
                self.waiting.popleft()
                self.reject(r, f"prompt of {r.fill_len} tokens exceeds max_model_len {self.cfg.max_model_len}")
                continue
            hit = self._hit_blocks(r)
            hit_tokens = hit * self.cache.block_size
            n = min(r.fill_len - hit_tokens, budget)
            reserve = r.fill_len if self.cfg.scheduler_reserve_full_isl else hit_tokens + n
            need = self.cache.blocks_for(reserve) - hit + evictable_among(self.cache, r, hit)
            if need > self.cache.num_free - self.watermark_blocks:
                break
            self.waiting.popleft()
            share_hits(self.cache, r, hit, now)
            if r.cached_tokens < 0:
                r.cached_tokens = hit_tokens
            self.counters.prefix_hit_tokens += hit_tokens
            self.counters.prefix_query_tokens += r.fill_len
            r.num_computed = hit_tokens
            self._grow(r, n, now)
            self.running.append(r)
            self._add_item(r, n, shape, items)
            budget -= n

    def schedule(self, now: float, step_id: int) -> Step | None:
        shape = BatchShape()
        items: list[tuple[Request, int]] = []
        budget, preempted = self._schedule_running(self.cfg.max_num_batched_tokens or 0, now, shape, items)
        for v in preempted:            # each victim is prepended as it is preempted
            self.waiting.appendleft(v)
        if not preempted:
            self._schedule_waiting(budget, now, shape, items)
        if not items:
            return None
        kind = "decode" if shape.is_pure_decode else ("prefill" if shape.decodes == 0 else "mixed")
        return Step(kind, items, shape)

    # --- decode fast-forward (simulator.fast_forward) ------------------------------------------------
    def _waiting_blocked(self, budget: int) -> bool:
        """Whether ``_schedule_waiting`` would admit nothing now and, blocks only getting scarcer and cached
        hits fewer during a decode run, nothing until a request leaves."""
        if not self.waiting or budget <= 0 or len(self.running) >= (self.cfg.max_num_seqs or 0):
            return True
        if self.cfg.scheduling_policy != "fcfs":
            return False
        r = self.waiting[0]
        if r.fill_len > (self.cfg.max_model_len or 0):
            return False
        hit = self._hit_blocks(r)
        n = min(r.fill_len - hit * self.cache.block_size, budget)
        reserve = r.fill_len if self.cfg.scheduler_reserve_full_isl else hit * self.cache.block_size + n
        need = self.cache.blocks_for(reserve) - hit + evictable_among(self.cache, r, hit)
        return need > self.cache.num_free - self.watermark_blocks

    def decode_run(self) -> BlockDecodeRun | None:
        """The pure-decode run the next steps would be (every running request decodes within the budget,
        none is preempted, nothing is admitted, none finishes), or None."""
        run = self.running
        n = len(run)
        budget = (self.cfg.max_num_batched_tokens or 0) - n
        if not n or budget < 0 or any(r.in_prefill for r in run) or not self._waiting_blocked(budget):
            return None
        steps = min(r.max_tokens - r.output_len for r in run) - 1
        return BlockDecodeRun(self, steps, reserve=0) if steps >= 2 else None

    def apply_decode_run(self, plan: BlockDecodeRun, k: int, times: list[float], step_id: int) -> None:
        """Apply k steps: step i grows each table and registers its newly full blocks when it is scheduled
        (``times[i - 1]``), as ``_grow`` does."""
        bs, cache = self.cache.block_size, self.cache
        end = times[k]
        for r in plan.reqs:
            nc0 = r.num_computed
            cache.append_slot(r, nc0 + k, 0, times[k - 1])
            if cache.prefix_caching:
                for d in range(len(r.engine.hashes) + 1, (nc0 + k) // bs + 1):
                    i = max(d * bs - nc0, 1)                      # the step whose growth filled block d
                    cache.promote_full_blocks(r, d * bs, 0, times[i - 1])
            r.num_computed = nc0 + k
            r.output_len += k
            r.last_token_s = end
            if r.token_times is not None:
                r.token_times.extend(times[1:k + 1])
