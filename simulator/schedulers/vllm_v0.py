"""vLLM 0.6.3 (V0) scheduler over the block manager V2 with prefix caching.

Unchunked (``_schedule_default``): admit waiting requests FCFS with head-of-line blocking, each costing
its whole prompt (+ generated tokens after a preemption) against the token budget and all its blocks
against the watermark; if any prefill was admitted the step is prefill-only, otherwise every running
request decodes. Chunked (``_schedule_chunked_prefill``): running requests first (decodes cost 1,
partial prefills take what budget is left), then new requests, the last one possibly cut into a chunk
(rounded down to whole blocks with prefix caching); blocks for the whole prompt are reserved at
admission. Decode growth preempts ``running[-1]`` by recompute when no block is free; victims go to the
front of ``waiting``. Cache hits skip compute, never budget (see BlockCache.computed_prefix_tokens).
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from simulator.block_cache import AllocStatus, BlockCache
from simulator.config import VllmV0Config
from simulator.cost_model import BatchShape
from simulator.request import Request
from simulator.schedulers.base import BlockDecodeRun, BlockSchedulerBase, Step
from simulator.schedulers.policies import get_ordering
from simulator.schedulers.victims import get_victim


class VllmV0Scheduler(BlockSchedulerBase):
    family: ClassVar[str] = "vllm-v0"

    def __init__(self, cfg: VllmV0Config):
        super().__init__()
        assert cfg.num_gpu_blocks and cfg.max_num_batched_tokens and cfg.max_model_len
        self.cfg = cfg
        self.cache = BlockCache(cfg.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching, "v0")
        self.budget = cfg.max_num_batched_tokens
        self.chunked = bool(cfg.enable_chunked_prefill)
        self.watermark_blocks = int(cfg.watermark * cfg.num_gpu_blocks)
        self.prompt_limit = cfg.max_model_len if self.chunked else min(cfg.max_model_len, self.budget)
        self.order = get_ordering(cfg.scheduling_policy)
        self.choose_victim = get_victim(cfg.preemption_victim)
        self.max_seqs = cfg.max_num_seqs

    # --- shared pieces ---------------------------------------------------------------------------
    def _ordered_waiting(self) -> None:
        if self.cfg.scheduling_policy != "fcfs" and len(self.waiting) > 1:
            self.waiting = deque(self.order(list(self.waiting), self._hit_tokens))

    def _hit_tokens(self, r: Request) -> int:
        return self.cache.lookup_hit_blocks(r, r.fill_len) * self.cache.block_size

    def _prefill_item(self, r: Request, n: int, step_id: int, shape: BatchShape) -> tuple[Request, int]:
        """Compute actually done for a chunk of n tokens starting at r.num_computed (hits skipped)."""
        start = r.num_computed
        hit = self.cache.computed_prefix_tokens(r, step_id, r.fill_len) if self.cache.prefix_caching else 0
        if start == 0 and r.cached_tokens < 0:
            r.cached_tokens = hit
        if start == 0:
            self.counters.prefix_query_tokens += r.fill_len
            self.counters.prefix_hit_tokens += hit
        q = max(start + n - max(start, hit), 1)
        samples = start + n >= r.fill_len
        shape.add_prefill(q, start + n - q, samples)
        return (r, n)

    def _admit(self, r: Request, step_id: int, now: float) -> None:
        self.cache.allocate(r, r.fill_len, step_id, now)

    def _preempt(self, victim: Request, now: float) -> None:
        self.cache.free(victim, now)
        victim.reset_for_recompute()
        self.counters.preemptions += 1

    def _grow_or_preempt(self, r: Request, queue: deque[Request], preempted: list[Request],
                         step_id: int, now: float) -> bool:
        """``can_append_slots`` loop: needs one free block (worst case); preempt queue[-1] until it fits.
        Returns False when r itself was preempted."""
        while self.cache.num_free < 1:
            victim = self._victim(queue) if queue else r
            self._preempt(victim, now)
            preempted.append(victim)
            if victim is r:
                return False
        self.cache.append_slot(r, r.fill_len, step_id, now)
        return True

    def _victim(self, queue: deque[Request]) -> Request:
        """``preemption_victim`` among the requests this step has yet to schedule (vLLM's: ``queue.pop()``)."""
        i = self.choose_victim(queue)
        victim = queue[i]
        del queue[i]
        return victim

    def _requeue(self, preempted: list[Request]) -> None:
        for v in preempted:           # waiting.extendleft(preempted): victims back to the front
            self.waiting.appendleft(v)

    # --- admission -------------------------------------------------------------------------------
    def _schedule_prefills(self, budget_left: int, seqs: int, step_id: int, now: float,
                           shape: BatchShape) -> tuple[list[tuple[Request, int]], int]:
        items: list[tuple[Request, int]] = []
        self._ordered_waiting()
        while self.waiting:
            r = self.waiting[0]
            n = r.fill_len
            if n > self.prompt_limit:
                self.waiting.popleft()
                self.reject(r, f"prompt of {n} tokens exceeds the limit of {self.prompt_limit}")
                continue
            status = self.cache.can_allocate(n, self.watermark_blocks)
            if status is AllocStatus.LATER:
                break
            if status is AllocStatus.NEVER:
                self.waiting.popleft()
                self.reject(r, f"prompt of {n} tokens can never fit in {self.cache.num_blocks} blocks")
                continue
            if self.chunked:
                n = min(n, budget_left)
                if n < r.fill_len and self.cache.prefix_caching:
                    n = n // self.cache.block_size * self.cache.block_size
            if n == 0 or n > budget_left or seqs + 1 > self.cfg.max_num_seqs:
                break
            self.waiting.popleft()
            self._admit(r, step_id, now)
            items.append(self._prefill_item(r, n, step_id, shape))
            budget_left -= n
            seqs += 1
        return items, budget_left

    # --- the two modes ---------------------------------------------------------------------------
    def schedule(self, now: float, step_id: int) -> Step | None:
        step = self._schedule_chunked(now, step_id) if self.chunked else self._schedule_default(now, step_id)
        for r, _ in step.items:
            self.cache.touch(r, now)
        return step if step.items else None

    def _schedule_default(self, now: float, step_id: int) -> Step:
        shape = BatchShape()
        items, _ = self._schedule_prefills(self.budget, len(self.running), step_id, now, shape)
        if items:
            self.running.extend(r for r, _ in items)
            return Step("prefill", items, shape)
        if (step := self._decode_all(now, step_id, shape)) is not None:
            return step
        queue = deque(self.running)   # popleft() walks running; pop() takes running[-1] as victim
        kept: list[Request] = []
        preempted: list[Request] = []
        while queue:
            r = queue.popleft()
            if self._grow_or_preempt(r, queue, preempted, step_id, now):
                kept.append(r)
                shape.add_decode(r.context_len)
        self.running = kept
        self._requeue(preempted)
        return Step("decode", [(r, 1) for r in kept], shape)

    def _decode_all(self, now: float, step_id: int, shape: BatchShape) -> Step | None:
        """The decode step when no request can be preempted: the blocks every running request takes leave one
        free, so ``_grow_or_preempt`` finds a block before each of them; the same blocks, in the same order,
        as its loop would take. None when a preemption is possible (the loop decides)."""
        run, cache = self.running, self.cache
        bs = cache.block_size
        grow = [r for r in run if r.fill_len > r.engine.num_blocks * bs]
        need = sum(-(-r.fill_len // bs) - r.engine.num_blocks for r in grow)
        if cache.num_free - need < 1:
            return None
        for r in grow:
            cache.append_slot(r, r.fill_len, step_id, now)
        for r in run:
            shape.add_decode(r.context_len)
        self.running = list(run)
        return Step("decode", [(r, 1) for r in run], shape)

    def _schedule_chunked(self, now: float, step_id: int) -> Step:
        shape = BatchShape()
        cache = self.cache
        bs = cache.block_size
        budget_left = self.budget
        seqs = 0
        queue = deque(self.running)
        decodes: list[tuple[Request, int]] = []
        partial: list[tuple[Request, int]] = []
        preempted: list[Request] = []
        while queue:
            r = queue[0]
            pre = r.in_prefill
            if pre:
                rem = r.remaining_prefill
                n = min(rem, budget_left)
                if n < rem and self.cache.prefix_caching:
                    n = n // self.cache.block_size * self.cache.block_size
            else:
                n = 1
            if n == 0 or n > budget_left or seqs + 1 > self.cfg.max_num_seqs:
                break
            queue.popleft()
            if not pre:
                # a request whose table covers its next token, with a block free, takes nothing: no call
                if (r.fill_len > r.engine.num_blocks * bs or cache.num_free < 1) and \
                        not self._grow_or_preempt(r, queue, preempted, step_id, now):
                    continue
                decodes.append((r, 1))
                shape.add_decode(r.context_len)
            else:
                partial.append(self._prefill_item(r, n, step_id, shape))
            budget_left -= n
            seqs += 1
        # vLLM 0.6.3 schedules new prefills even in a step that preempted (victims rejoin waiting after)
        new, budget_left = self._schedule_prefills(budget_left, seqs, step_id, now, shape)
        self.running = list(queue) + [r for r, _ in decodes] + [r for r, _ in partial] + [r for r, _ in new]
        self._requeue(preempted)
        items = decodes + partial + new
        kind = "decode" if not partial and not new else ("prefill" if not decodes else "mixed")
        return Step(kind, items, shape)

    # --- decode fast-forward (simulator.fast_forward) ------------------------------------------------
    def _head_waits(self, budget_left: int, seqs: int) -> bool:
        """Whether ``_schedule_prefills`` would admit nothing now and, blocks only ever getting scarcer during
        a decode run, nothing until a request leaves (a reject or an admission ends the run)."""
        if not self.waiting:
            return True
        if self.cfg.scheduling_policy != "fcfs":
            return False
        r = self.waiting[0]
        n = r.fill_len
        if n > self.prompt_limit:
            return False
        status = self.cache.can_allocate(n, self.watermark_blocks)
        if status is AllocStatus.LATER:
            return True
        if status is AllocStatus.NEVER:
            return False
        if self.chunked:
            n = min(n, budget_left)
            if n < r.fill_len and self.cache.prefix_caching:
                n = n // self.cache.block_size * self.cache.block_size
        return n == 0 or n > budget_left or seqs + 1 > self.cfg.max_num_seqs

    def decode_run(self) -> BlockDecodeRun | None:
        """The pure-decode run the next steps would be, or None (the next step may differ from the last)."""
        run = self.running
        n = len(run)
        if not n or any(r.in_prefill for r in run):
            return None
        budget_left = self.budget - n if self.chunked else self.budget
        if self.chunked and (budget_left < 0 or n > self.cfg.max_num_seqs):
            return None
        if not self._head_waits(budget_left, n):
            return None
        steps = min(r.max_tokens - r.output_len for r in run)         # requests finish in the last
        return BlockDecodeRun(self, steps, reserve=1, finish=True) if steps >= 2 else None

    def apply_decode_run(self, plan: BlockDecodeRun, k: int, times: list[float], step_id: int) -> Step | None:
        """Apply k steps of the run: ``times[i]`` is when step i ended (times[0]: when the run started),
        step i's id is step_id + i − 1. Where the k-th is the run's last, in which requests finish, it is
        applied up to its tokens and returned for ``complete`` (promotion, the finished requests' free)."""
        cache = self.cache
        final = plan.finish and k == plan.steps
        t = k - 1 if final else k                      # steps whose tokens are emitted here
        last_start, end = times[k - 1], times[t]
        for r in plan.reqs:
            nc0 = r.num_computed
            cache.append_slot(r, r.fill_len + k - 1, step_id, last_start)
            r.num_computed = nc0 + t
            r.output_len += t
            r.last_token_s = end
            if r.token_times is not None:
                r.token_times.extend(times[1:t + 1])
            cache.promote_decoded(r, nc0, nc0 + t, step_id, times)
            r.engine.last_access = last_start
        return Step("decode", [(r, 1) for r in plan.reqs], BatchShape(decodes=len(plan.reqs))) if final else None

