"""What every engine scheduler shares: the Step it returns, the counters it keeps, the common
completion rule. Engine-specific rules live in one file per engine family."""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar, Protocol

from simulator.cost_model import BatchShape
from simulator.request import Request


class Step:
    """One engine iteration: each item is (request, tokens advanced this step). (Plain classes here and in the
    other compiled modules, not dataclasses: compiled, a dataclass keeps its generated ``__init__`` interpreted.)"""

    __slots__ = ("kind", "items", "shape")

    def __init__(self, kind: str, items: list[tuple[Request, int]], shape: BatchShape | None = None):
        self.kind = kind                   # "prefill", "decode" or "mixed"
        self.items = items
        self.shape = BatchShape() if shape is None else shape


class Counters:
    __slots__ = ("preemptions", "prefix_hit_tokens", "prefix_query_tokens", "ignored")

    def __init__(self) -> None:
        self.preemptions = 0
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0
        self.ignored = 0


class Scheduler(Protocol):
    """What the replica (simulator.engine) asks of an engine family's scheduler."""

    family: ClassVar[str]
    waiting: deque[Request]
    running: list[Request]
    counters: Counters
    rejected: list[Request]

    @property
    def has_work(self) -> bool: ...
    def add(self, req: Request, now: float) -> None: ...
    def schedule(self, now: float, step_id: int) -> Step | None: ...
    def complete(self, step: Step, now: float, step_id: int) -> list[Request]: ...
    def flush(self, now: float) -> list[Request]: ...
    def abort(self, r: Request, now: float) -> None: ...
    def reject(self, req: Request, why: str) -> None: ...
    def kv_usage(self) -> float: ...
    def distinct_kv_tokens(self) -> int: ...
    def check_integrity(self) -> None: ...


class SchedulerBase:
    """Queues and counters; subclasses implement ``schedule``, ``release`` and ``kv_usage``."""

    family: ClassVar[str] = "base"

    def __init__(self) -> None:
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.counters = Counters()
        self.rejected: list[Request] = []

    def add(self, req: Request, now: float) -> None:
        self.waiting.append(req)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def distinct_kv_tokens(self) -> int:
        """KV tokens held by requests, each shared one counted once (-1: unknown)."""
        return -1

    def flush(self, now: float) -> list[Request]:
        """Called when the engine finds nothing to run: results still held back are delivered now. Returns
        the requests that thereby finish (none for engines that deliver a step's results at its end)."""
        return []

    def reject(self, req: Request, why: str) -> None:
        """A request the engine can never serve (vLLM FINISHED_IGNORED; too long for the pool)."""
        req.error = why
        self.counters.ignored += 1
        self.rejected.append(req)

    def advance(self, step: Step, now: float) -> list[Request]:
        """Apply a finished step: advance computed tokens, emit tokens. Returns requests that finished."""
        done = []
        for req, n in step.items:
            nc = req.num_computed + n
            req.num_computed = nc
            if nc >= req.prompt_len + req.output_len:           # fill_len: the prefill (or decode) is done
                req.emit_token(now)
                if req.output_len >= req.max_tokens:
                    done.append(req)
        return done


class BlockSchedulerBase(SchedulerBase):
    """What vLLM's V0 and V1 schedulers share over a BlockCache: completion (promote newly full blocks,
    free finished requests), client aborts and the integrity contract. Subclasses set ``cache`` and
    ``max_seqs``."""

    cache: Any
    max_seqs: int

    def kv_usage(self) -> float:
        return float(self.cache.usage())

    def distinct_kv_tokens(self) -> int:
        return int(self.cache.num_used) * int(self.cache.block_size)    # shared blocks counted once

    def complete(self, step: Step, now: float, step_id: int) -> list[Request]:
        done = self.advance(step, now)
        bs = self.cache.block_size
        for r, _ in step.items:         # only a table with a newly full block can promote one
            t = r.engine
            if t is not None and r.num_computed // bs > len(t.hashes):
                self.cache.promote_full_blocks(r, r.num_computed, step_id, now)
        self.cache.free_many(done, now)
        for r in done:
            r.release_tokens()
        if done:
            fin = {id(r) for r in done}
            self.running = [r for r in self.running if id(r) not in fin]
        return done

    def fresh_outputs(self, run: list[Request], steps: int) -> bool:
        """The blocks a decode run of ``steps`` fills are new to the cache (a promotion that met a cached hash
        would free a block mid-run: step by step then)."""
        if not self.cache.prefix_caching:
            return True
        bs, cached = self.cache.block_size, self.cache.cached
        for r in run:
            have = len(r.engine.hashes)
            full = (r.num_computed + steps) // bs
            if full > have:
                hs = r.hash_memo(full, bs)
                if any(int(h) in cached for h in hs[have:full]):
                    return False
        return True

    def abort(self, r: Request, now: float) -> None:
        """The client gave up (request timeout): drop r wherever it is and free its blocks."""
        if r in self.waiting:
            self.waiting.remove(r)
        elif any(x is r for x in self.running):
            self.cache.free(r, now)
            self.running = [x for x in self.running if x is not r]

    def check_integrity(self) -> None:
        self.cache.check_integrity(self.running)
        assert len(self.running) <= self.max_seqs, "max_num_seqs exceeded"
        assert all(r.engine is None for r in self.waiting), "a waiting request holds blocks"


class BlockDecodeRun:
    """A decode run over a BlockCache (simulator.fast_forward.DecodeRun): step i grows each table to cover its
    fill length + i − 1 tokens; every growth check must find a block beyond ``reserve`` (vLLM V0 wants one
    free block before every append, V1 only the blocks it takes).

    Request j with fill length f and b blocks needs max(0, ⌈(i + d)/block_size⌉) more blocks at step i, d = f − 1 −
    b·block_size: one more each step at which i + d ≥ 1 and i + d − 1 is a multiple of the block size. The steps are
    counted that way, a residue class at a time, so pricing K steps of n requests costs n + K, not n · K."""

    def __init__(self, sched: BlockSchedulerBase, steps: int, reserve: int, finish: bool = False):
        self.sched, self.steps, self.reserve = sched, steps, reserve
        self.finish = finish                 # requests finish in its last step (completed by ``complete``)
        self.reqs = list(sched.running)
        self.ctx0 = sum(r.num_computed for r in self.reqs)
        bs = sched.cache.block_size
        self._bs = bs
        self._d = sorted((r.fill_len - 1 - r.engine.num_blocks * bs for r in self.reqs), reverse=True)
        self._nb = sched.cache.num_blocks
        self._free0 = sched.cache.num_free
        self._at = 0                         # the step whose need is counted below (0: before the first)
        self._need = 0                       # blocks the requests take in steps 1 … _at
        self._active = 0                     # requests (in _d's order) that have begun to take blocks by then
        self._by_residue = [0] * bs          # of those, how many take a block at each step ≡ −(d − 1) mod bs

    def states(self, i: int, m: int) -> tuple[list[int], list[float]]:
        if i <= self._at:                    # a pass from the start again: count afresh
            self._at = self._need = self._active = 0
            self._by_residue = [0] * self._bs
        d, bs, by = self._d, self._bs, self._by_residue
        at, need, active, n = self._at, self._need, self._active, len(self._d)
        distinct: list[int] = []
        usage: list[float] = []
        end = min(i + m, self.steps + 1)
        while at + 1 < end:                  # count step at + 1's blocks
            at += 1
            while active < n and d[active] >= 1 - at:
                by[(d[active] - 1) % bs] += 1
                active += 1
            need += by[-at % bs]
            if at >= i:
                free = self._free0 - need
                if free < self.reserve:
                    break
                distinct.append((self._nb - free) * bs)
                usage.append(1.0 - free / self._nb)
        self._at, self._need, self._active = at, need, active
        return distinct, usage

    def valid(self, k: int) -> bool:
        return self.sched.fresh_outputs(self.reqs, k)
