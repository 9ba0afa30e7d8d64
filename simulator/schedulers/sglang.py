"""SGLang scheduler (0.4.1 rules; ``sglang-current`` differs only in resolved defaults).

Each iteration tries to build a PREFILL (extend) batch first — the request being chunked continues,
then waiting requests in policy order (LPM by radix match with the >128 FCFS fallback and in-batch
prefix de-duplication) admitted while the ``new_token_ratio`` reservation, ``max_prefill_tokens`` and
the chunk budget allow (only one request cut at a time); if one forms it runs alone. Otherwise every
running request decodes; when the pool (after radix eviction) cannot hold one slot per request, the
requests with the fewest outputs (ties: longest prompt) are retracted to the tail of ``waiting``.
With the overlap scheduler (``event_loop_overlap``) the CPU schedules batch N+1 while the GPU runs batch
N, so a request that arrives while a batch runs is first seen when batch N+2 is scheduled (unless the
engine is idle), and a finished request is released one step late and, if that step is a decode, takes
one more slot in it (0.4.x; 0.5's overlap loop leaves a request whose in-flight token finishes it by
length out of the next decode — ``enable_skip_finishing_decode`` — though its slots are still freed one
step late). On a CPU the overlap scheduler's forward runs inline on the scheduler's thread
(``forward_stream: inline``; streams are no-ops there): an iteration schedules batch N+1, runs it, then
processes batch N's results — so a request arriving during a batch is seen by the next one, but a batch's
tokens reach the client (and its finished requests their callers) only after the next batch's forward,
or at once when nothing else is to run. In either overlap mode a finished prefill's prompt enters the
radix tree when batch N's results are processed (``checkpoint_kv_cache`` in ``process_batch_result_prefill``),
after batch N+1 has been scheduled: a request scheduled into batch N+1 does not match it (measured: three
agent planners arriving within 0.11 s of each other on a fresh SGLang 0.5.23 CPU instance — the second and
third report 0 cached tokens, not 1,843). A request being chunked is checkpointed when the next batch is
scheduled, so its chunks match at once.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from simulator.config import SglangConfig
from simulator.cost_model import BatchShape
from simulator.kernels import token_bytes
from simulator.radix_cache import Node, RadixCache
from simulator.request import Request
from simulator.schedulers.base import SchedulerBase, Step
from simulator.schedulers.policies import get_ordering
from simulator.schedulers.victims import get_victim


class SgState:
    """A request's slots: ``prefix_len`` tokens owned by the radix tree (locked through ``node``) and
    ``kv_len - prefix_len`` private slots."""

    __slots__ = ("prefix_len", "node", "kv_len")

    def __init__(self, prefix_len: int, node: Node, kv_len: int):
        self.prefix_len, self.node, self.kv_len = prefix_len, node, kv_len


class MatchMemo:
    """A waiting request's last radix match at one fill length: the comparisons made (``RadixCache.match_prefix``'s
    memo), the key's bytes, and the match with its path's stamps and next token (``RadixCache.path_unchanged``)."""

    __slots__ = ("fill_len", "compared", "key_bytes", "version", "got", "path", "stamps", "next_token")

    def __init__(self, fill_len: int, key_bytes: bytes | None):
        self.fill_len, self.key_bytes = fill_len, key_bytes
        self.compared: dict[int, tuple[np.ndarray, int, int]] = {}
        self.version = -1
        self.got: tuple[int, Node] | None = None        # set with path, stamps and next token
        self.path: list[Node] | None = None
        self.stamps: list[int] = []
        self.next_token: int | None = None


class SglangScheduler(SchedulerBase):
    family: ClassVar[str] = "sglang"

    def __init__(self, cfg: SglangConfig):
        super().__init__()
        assert cfg.max_total_tokens and cfg.max_running_requests and cfg.context_length
        self.cfg = cfg
        self.total = cfg.max_total_tokens
        self.tree = RadixCache()
        self.available = self.total
        self.private = 0
        self.being_chunked: Request | None = None
        self.batch_is_full = False
        # 0.4.1 resets batch_is_full when update_running_batch's filter_batch sees the running batch shrink, i.e.
        # at the decode after a finish is processed (two decodes on with overlap: one more runs with the finished
        # request before its result is processed); each entry counts the decodes left until that filter
        self.unfull_in: list[int] = []
        self.init_ratio = min(0.7 * cfg.schedule_conservativeness, 1.0)
        self.min_ratio = min(self.init_ratio * cfg.new_token_ratio_min_factor, 1.0)
        self.decay = (self.init_ratio - self.min_ratio) / cfg.new_token_ratio_decay_steps
        self.ratio = self.init_ratio
        self.overlap = not cfg.disable_overlap_schedule
        self.inline = self.overlap and cfg.forward_stream == "inline"
        self.finishing_decode_slot = self.overlap and cfg.version.startswith("0.4")
        # decodes from a finish to the filter that sees it: 0.4.1, the next update_running_batch (with overlap the
        # one after: the finished request rides one more step); 0.5 excludes a request its in-flight token finishes
        # from the next decode (update_running_batch, ``_reqs_finishing_inflight``) and, without overlap, filters a
        # processed finish at the top of get_next_batch_to_run, before the prefill is tried
        self.filter_delay = (2 if self.overlap else 1) if cfg.version.startswith("0.4") else int(self.overlap)
        # admission takes the match the ordering made (0.4.1 get_new_batch_prefill: init_next_round_input(None if
        # prefix_computed …)); 0.5 matches every request it tries again (init_next_round_input(self.tree_cache))
        self.rematch_on_admission = not cfg.version.startswith("0.4")
        self.unsent: list[Request] = []       # inline: emitted their token in the last step, not yet streamed
        self.unreported: list[Request] = []   # inline: finished in the last step, not yet reported
        self.lame_ducks: list[Request] = []     # finished last step, released after this one
        self.unprocessed: list[tuple[Request, int]] = []   # overlap: prefilled last step, prompt not yet in the tree
        self.inbox: list[tuple[float, Request]] = []   # received but not yet seen by the scheduler
        self._last_step_at: float | None = None        # when the batch now finishing was scheduled
        chunk = cfg.chunked_prefill_size
        self.chunk = None if chunk is None or chunk <= 0 else chunk
        self.order = get_ordering(cfg.schedule_policy)
        # _in_batch_dedup's last requests, answer and scratch tree
        self._dedup_last: tuple[list[Request], set[int], RadixCache] = ([], set(), RadixCache())
        self.choose_victim = get_victim(cfg.preemption_victim)
        self.max_req_len = min(cfg.context_length - 1, self.total - 1)

    def add(self, req: Request, now: float) -> None:
        self.inbox.append((now, req))

    def _receive(self, everything: bool) -> None:
        """``recv_requests``: in overlap mode, only what arrived before the running batch was launched."""
        cutoff = self._last_step_at
        if everything or not self.overlap or self.inline or cutoff is None:
            self.waiting.extend(r for _, r in self.inbox)
            self.inbox = []
            return
        seen = [r for t, r in self.inbox if t <= cutoff]
        self.inbox = [(t, r) for t, r in self.inbox if t > cutoff]
        self.waiting.extend(seen)

    # --- memory ----------------------------------------------------------------------------------
    def kv_usage(self) -> float:
        """token_usage as SGLang reports it: evictable cached tokens count as free."""
        return (self.total - self.available - self.tree.evictable_size) / self.total

    def distinct_kv_tokens(self) -> int:
        return self.tree.protected_size + self.private      # locked prefixes counted once, plus private slots

    def _alloc(self, n: int) -> bool:
        if self.available < n:
            self.available += self.tree.evict(n - self.available)
        if self.available < n:
            return False
        self.available -= n
        self.private += n
        return True

    def _match(self, r: Request, now: float) -> tuple[int, Node]:
        if self.cfg.disable_radix_cache:
            return 0, self.tree.root
        # a waiting request is matched at every prefill decision: while no node on its last match's path was split
        # or removed since, and the last still has no child for the next token (RadixCache.path_unchanged), the
        # match is the same and only its touches are repeated
        memo: MatchMemo | None = r.match_memo
        tree = self.tree
        key = None
        if memo is None or memo.fill_len != r.fill_len:
            key = r.tokens(r.fill_len)
            memo = r.match_memo = MatchMemo(r.fill_len, token_bytes(key))
        elif memo.got is not None and memo.path is not None and (
                memo.version == tree.version or tree.path_unchanged(memo.path, memo.stamps, memo.next_token)):
            memo.version = tree.version
            tree.touch(memo.path)
            return memo.got
        version, path = tree.version, list[Node]()
        if key is None:
            key = r.tokens(r.fill_len)
        got = tree.match_prefix(key, now, r.fill_len - 1, memo.compared, path, memo.key_bytes)
        if tree.version == version:
            memo.version, memo.got, memo.path = version, got, path
            memo.stamps = [nd.stamp for nd in path]
            memo.next_token = int(key[got[0]]) if got[0] < r.fill_len - 1 else None
        return got

    def _cache_req(self, r: Request, n_tokens: int, now: float, finished: bool) -> None:
        """``cache_unfinished_req`` / ``cache_finished_req``: insert the first n_tokens, free duplicate
        slots, move the lock to the new node (or drop it when finished)."""
        st: SgState = r.engine
        if self.cfg.disable_radix_cache:
            if finished:
                self.available += st.kv_len
                self.private -= st.kv_len
                r.engine = None
            return
        key = r.tokens(n_tokens)
        path: list[Node] = []
        existing = self.tree.insert(key, now, path)
        dup = max(existing - st.prefix_len, 0)
        new_owned = n_tokens - max(existing, st.prefix_len)
        # slots beyond the key: freed at finish (the last token), kept private while the request runs
        # (a decode that ran before its prefill's results were processed)
        extra = st.kv_len - n_tokens if finished else 0
        self.private -= dup + new_owned + extra
        self.available += dup + extra
        self.tree.dec_lock_ref(st.node)
        if finished:
            r.engine = None
            return
        self.tree.touch(path)        # RadixCache.match_prefix of the key just inserted: the same nodes, in order
        node = path[-1]
        self.tree.inc_lock_ref(node)
        st.node, st.prefix_len = node, n_tokens

    def _release(self, r: Request, now: float) -> None:
        st: SgState | None = r.engine
        if st is None:
            return
        self._cache_req(r, st.kv_len, now, finished=True)
        r.release_tokens()

    # --- ordering --------------------------------------------------------------------------------
    def _ordered(self, now: float) -> tuple[list[Request], dict[int, tuple[int, Node]] | None]:
        """``SchedulePolicy.calc_priority``: the waiting queue in the order admission tries it, and each request's
        match where the policy computed it (LPM, dfs-weight: ``prefix_computed``, so admission does not match
        again); None where admission matches each request it tries (``init_next_round_input(tree_cache)``)."""
        waiting = list(self.waiting)
        policy = self.cfg.schedule_policy
        if policy == "lpm" and len(waiting) > self.cfg.lpm_fallback_threshold:
            policy = "fcfs"
        if policy not in ("lpm", "dfs-weight") or self.cfg.disable_radix_cache:
            return get_ordering(policy if policy != "lpm" else "fcfs")(waiting, lambda r: 0), None
        got = {id(r): self._match(r, now) for r in waiting}
        deprio = self._in_batch_dedup(waiting, got, now) if policy == "lpm" else set()
        ordered = self.order(waiting, lambda r: -1 if id(r) in deprio else got[id(r)][0])
        self.waiting.clear()
        self.waiting.extend(ordered)          # the sort is in place: the queue stays permuted
        return ordered, got

    def _in_batch_dedup(self, waiting: list[Request], got: dict[int, tuple[int, Node]], now: float) -> set[int]:
        """The waiting requests whose prefix another, earlier one shares (SGLang builds a scratch radix tree of
        the uncached ones each time): a function of those requests in order alone, so the last answer stands
        while they are the same requests in the same order (a waiting request's tokens do not change), and where
        the last requests lead the new ones the last scratch tree goes on with the rest."""
        th = self.cfg.in_batch_prefix_threshold
        cand = [r for r in waiting if got[id(r)][0] <= th]
        last, answer, scratch = self._dedup_last
        n = len(last)
        if n <= len(cand) and all(a is b for a, b in zip(cand, last, strict=False)):
            if n == len(cand):
                return answer
            out = set(answer)
        else:
            n, scratch, out = 0, RadixCache(), set()
        for r in cand[n:]:
            key = r.tokens(r.fill_len)
            m, _ = scratch.match_prefix(key, now)
            if m >= th:
                out.add(id(r))
            else:
                scratch.insert(key, now)
        self._dedup_last = (cand, out, scratch)
        return out

    # --- prefill batch ---------------------------------------------------------------------------
    def _reserved_for_running(self) -> float:
        clip = self.cfg.clip_max_new_tokens
        return sum(min(r.max_tokens - r.output_len, clip) for r in self.running) * self.ratio

    def _new_prefill(self, now: float, shape: BatchShape) -> list[tuple[Request, int]]:
        if (self.batch_is_full or not self.waiting) and self.being_chunked is None:
            return []
        if len(self.running) >= (self.cfg.max_running_requests or 0):
            self.batch_is_full = True
            return []
        rem_total = self.available + self.tree.evictable_size - self._reserved_for_running()
        cur_rem = self.available + self.tree.evictable_size
        rem_input = self.cfg.max_prefill_tokens
        rem_chunk = self.chunk if self.chunk is not None else 1 << 62
        items: list[tuple[Request, int]] = []
        clip = self.cfg.clip_max_new_tokens
        if self.being_chunked is not None:
            r = self.being_chunked
            n = min(r.remaining_prefill, rem_chunk)
            last = n == r.remaining_prefill
            items.append((r, n))
            reserve = min(r.max_tokens - r.output_len, clip) if last else 0
            rem_total -= n + reserve
            cur_rem -= n
            rem_input -= n
            rem_chunk -= n
            self.being_chunked = None if last else r
        # calc_priority runs whenever prefill is tried, even when the request being chunked took the whole chunk:
        # the head of the queue is then still offered (NO_TOKEN marks the batch full; a chunk of 0 is OTHER)
        ordered, computed = self._ordered(now) if self.waiting else ([], None)
        if self.rematch_on_admission:
            computed = None
        for r in ordered:
            if len(self.running) + len(items) >= (self.cfg.max_running_requests or 0):
                self.batch_is_full = True
                break
            if r.fill_len > self.max_req_len:
                self.waiting.remove(r)
                self.reject(r, f"prompt of {r.fill_len} tokens exceeds max_req_len {self.max_req_len}")
                continue
            prefix, node = computed[id(r)] if computed is not None else self._match(r, now)
            extend = r.fill_len - prefix
            total = extend + min(r.max_tokens - r.output_len, clip)
            if total >= rem_total:
                self.batch_is_full = True
                break
            if extend > rem_input and items:
                break
            locked = self.tree.inc_lock_ref(node)
            rem_total -= locked
            if total > rem_total:
                self.tree.dec_lock_ref(node)
                self.batch_is_full = True
                break
            if extend > rem_chunk == 0:            # a chunk of no tokens: OTHER
                self.tree.dec_lock_ref(node)
                break
            r.engine = SgState(prefix, node, prefix)
            r.match_memo = None
            r.num_computed = prefix
            if r.cached_tokens < 0:
                r.cached_tokens = prefix
            self.counters.prefix_hit_tokens += prefix
            self.counters.prefix_query_tokens += r.fill_len
            self.waiting.remove(r)
            if extend <= rem_chunk:
                items.append((r, extend))
                rem_total -= total
                cur_rem -= extend
                rem_input -= extend
                rem_chunk -= extend
            else:
                items.append((r, rem_chunk))
                self.being_chunked = r
                rem_chunk = 0
            if rem_total <= 0 or cur_rem <= 0:     # budget_state: NO_TOKEN
                self.batch_is_full = True
                break
            if rem_input <= 0 or rem_chunk <= 0:    # OTHER
                break
        for r, n in items:
            if not self._alloc(n):
                raise RuntimeError("SGLang: Prefill out of memory (admission budget violated)")
            r.engine.kv_len += n
            shape.add_prefill(n, r.num_computed, r.num_computed + n >= r.fill_len)
        return items

    # --- decode batch ----------------------------------------------------------------------------
    def _retract(self, now: float) -> None:
        order = list(self.running)
        retracted: list[Request] = []
        steps = self.cfg.retract_decode_steps
        while len(order) > 1 and (not retracted or self.available < len(order) * steps):
            victim = order.pop(self.choose_victim(order))      # preemption_victim (SGLang's: fewest_decoded)
            st: SgState = victim.engine
            self.private -= st.kv_len - st.prefix_len
            self.available += st.kv_len - st.prefix_len
            self.tree.dec_lock_ref(st.node)
            victim.reset_for_recompute()
            self.counters.preemptions += 1
            retracted.append(victim)
            if self.available < len(order) * steps:
                self.available += self.tree.evict(len(order) * steps - self.available)
        self.running = [r for r in self.running if r in order]
        self.unprocessed = [(r, n) for r, n in self.unprocessed if r in order]   # a retracted one is skipped
        self.waiting.extend(retracted)
        decoded = sum(r.output_len for r in self.running)
        max_new = sum(r.max_tokens for r in self.running)
        self.ratio = min(1.0, (decoded + steps * len(self.running)) / max(max_new, 1))
        self.batch_is_full = False

    def _decode(self, now: float, shape: BatchShape) -> list[tuple[Request, int]]:
        if self.unfull_in:                  # update_running_batch: the filter sees a processed finish
            self.unfull_in = [n - 1 for n in self.unfull_in]
            if 0 in self.unfull_in:
                self.batch_is_full = False
                self.unfull_in = [n for n in self.unfull_in if n]
        bs = len(self.running)
        if self.available < bs:
            self.available += self.tree.evict(bs - self.available)
        if self.available < bs:
            self._retract(now)
        else:
            self.ratio = max(self.ratio - self.decay, self.min_ratio)
        run = self.running
        if self.available >= len(run):                # one slot each, none to evict: taken at once
            self.available -= len(run)
            self.private += len(run)
        else:
            for _ in run:
                self._alloc(1)
        ctx = 0
        for r in run:
            r.engine.kv_len += 1
            ctx += r.num_computed
        shape.decodes += len(run)
        shape.decode_ctx += ctx
        return [(r, 1) for r in run]

    # --- the iteration ---------------------------------------------------------------------------
    def schedule(self, now: float, step_id: int) -> Step | None:
        self._receive(everything=False)
        step = self._schedule(now)
        if step is None and self.inbox:             # idle: the loop receives at once
            self._receive(everything=True)
            step = self._schedule(now)
        self._last_step_at = now if step is not None else None
        return step

    def _schedule(self, now: float) -> Step | None:
        shape = BatchShape()
        if not self.running and self.being_chunked is None:
            self.batch_is_full = False
        items = self._new_prefill(now, shape)
        if items:
            return Step("prefill", items, shape)
        if not self.running:
            self.ratio = self.init_ratio
            for r in self.lame_ducks:
                self._release(r, now)
            self.lame_ducks = []
            return None
        items = self._decode(now, shape)
        if self.finishing_decode_slot:
            for r in self.lame_ducks:       # overlap (0.4.x): finished requests ride one more decode
                shape.add_decode(r.context_len)
        return Step("decode", items, shape)

    def _deliver(self, now: float) -> list[Request]:
        """Inline forward: the previous batch's results are processed now (tokens streamed, finished
        requests reported)."""
        for r in self.unsent:
            r.restamp_last_token(now)
        reported = self.unreported
        self.unsent, self.unreported = [], []
        return reported

    def _process_prefills(self, now: float) -> None:
        """Overlap: the last batch's prefilled prompts enter the tree (its results are processed)."""
        for r, n in self.unprocessed:
            self._cache_req(r, n, now, finished=False)
        self.unprocessed = []

    def flush(self, now: float) -> list[Request]:
        self._process_prefills(now)
        return self._deliver(now) if self.inline else []

    def complete(self, step: Step, now: float, step_id: int) -> list[Request]:
        for r in self.lame_ducks:
            self._release(r, now)
        self.lame_ducks = []
        self._process_prefills(now)
        reported = self._deliver(now) if self.inline else []
        before = [r.output_len for r, _ in step.items] if self.inline else []
        done = self.advance(step, now)
        if self.inline:
            self.unsent = [r for (r, _), n in zip(step.items, before, strict=True) if r.output_len > n]
        if step.kind == "prefill":
            for r, _ in step.items:
                st: SgState = r.engine
                if r is self.being_chunked:
                    self._cache_req(r, st.kv_len, now, finished=False)
                elif not r.is_finished:
                    if self.overlap:
                        self.unprocessed.append((r, st.kv_len))
                    else:
                        self._cache_req(r, st.kv_len, now, finished=False)
                    self.running.append(r)
            if self.being_chunked is not None:
                self.batch_is_full = False
        if done:
            fin = {id(r) for r in done}
            self.running = [r for r in self.running if id(r) not in fin]
            if self.filter_delay:
                self.unfull_in.append(self.filter_delay)
            else:
                self.batch_is_full = False
            if self.overlap:
                self.lame_ducks = done
            else:
                for r in done:
                    self._release(r, now)
        if self.inline:
            self.unreported, done = done, reported
        return done

    # --- decode fast-forward (simulator.fast_forward) ------------------------------------------------
    def decode_run(self) -> SgDecodeRun | None:
        """The pure-decode run the next steps would be: nothing waits to be received, admitted (none waits,
        or the batch is full until a request leaves), chunked, released or put in the tree; every decode's
        slots are free without eviction; none finishes before its last step. An inline forward (a CPU) streams
        each step late: step by step there."""
        run = self.running
        bs = len(run)
        if (not bs or self.inline or self.inbox or self.being_chunked is not None or self.lame_ducks or self.unfull_in
                or self.unprocessed or (self.waiting and not self.batch_is_full)
                or any(r.in_prefill for r in run)):
            return None
        first_done = min(r.max_tokens - r.output_len for r in run)
        steps = min(first_done, self.available // bs)
        return SgDecodeRun(self, steps, steps == first_done) if steps >= 2 else None

    def apply_decode_run(self, plan: SgDecodeRun, k: int, times: list[float], step_id: int) -> Step | None:
        """Apply the first k steps (slots, ``new_token_ratio``); where the k-th is the run's last and requests
        finish in it, its tokens are left to ``complete``: the step is returned for it."""
        final = plan.finish and k == plan.steps
        t = k - 1 if final else k                      # steps whose tokens are emitted here
        end = times[t]
        for r in plan.reqs:
            r.engine.kv_len += k
            r.num_computed += t
            r.output_len += t
            r.last_token_s = end
            if r.token_times is not None:
                r.token_times.extend(times[1:t + 1])
        n = len(plan.reqs)
        self.available -= n * k
        self.private += n * k
        for _ in range(k):
            self.ratio = max(self.ratio - self.decay, self.min_ratio)
        self._last_step_at = times[k - 1]
        return Step("decode", [(r, 1) for r in plan.reqs], BatchShape(decodes=n)) if final else None

    def abort(self, r: Request, now: float) -> None:
        """The client gave up (request timeout): drop r and free its private slots (its cached prefix
        stays in the tree, unlocked)."""
        if any(x is r for _, x in self.inbox):
            self.inbox = [(t, x) for t, x in self.inbox if x is not r]
            return
        if r in self.waiting:
            self.waiting.remove(r)
            return
        if self.being_chunked is r:
            self.being_chunked = None
        elif not any(x is r for x in self.running):
            return
        self.running = [x for x in self.running if x is not r]
        self.unprocessed = [(x, n) for x, n in self.unprocessed if x is not r]
        st: SgState | None = r.engine
        if st is not None:
            self.private -= st.kv_len - st.prefix_len
            self.available += st.kv_len - st.prefix_len
            self.tree.dec_lock_ref(st.node)
            r.engine = None
        self.batch_is_full = False

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.being_chunked or self.lame_ducks or self.inbox)

    def check_integrity(self) -> None:
        self.tree.check_integrity()
        assert self.available >= 0 and self.private >= 0, "negative slot counts"
        assert self.available + self.private + self.tree.total_size == self.total, (
            f"available {self.available} + private {self.private} + tree {self.tree.total_size} != {self.total}")
        live = self.running + self.lame_ducks + ([self.being_chunked] if self.being_chunked else [])
        priv = sum(r.engine.kv_len - r.engine.prefix_len for r in live if r.engine is not None)
        assert priv == self.private, f"private slots {priv} != counter {self.private}"
        assert len(self.running) <= (self.cfg.max_running_requests or 0), "max_running_requests exceeded"


class SgDecodeRun:
    """An SGLang decode run (simulator.fast_forward.DecodeRun): each step takes one slot per request; with
    ``finish`` requests finish in its last step."""

    def __init__(self, sched: SglangScheduler, steps: int, finish: bool):
        self.steps, self.finish = steps, finish
        self.reqs = list(sched.running)
        self.ctx0 = sum(r.num_computed for r in self.reqs)
        self._total, self._ev = sched.total, sched.tree.evictable_size
        self._held, self._avail = sched.tree.protected_size + sched.private, sched.available

    def states(self, i: int, m: int) -> tuple[list[int], list[float]]:
        n, distinct, usage = len(self.reqs), [], []
        for s in range(i, min(i + m, self.steps + 1)):
            taken = n * s
            distinct.append(self._held + taken)
            usage.append((self._total - (self._avail - taken) - self._ev) / self._total)
        return distinct, usage

    def valid(self, k: int) -> bool:
        return True
