"""vLLM's paged KV cache with automatic prefix caching over hashed full blocks.

Blocks are counted, not materialised: a block is either *free* (no content), *cached* (a full block
registered under its chained hash, shared by every sequence that references it) or *private* (a
sequence's mutable tail block, or any block when prefix caching is off). Cached blocks whose
reference count drops to zero stay in the cache as *evictable* until a fresh block is needed.

Eviction order by variant (see docs/engines.md):
- ``v0`` (vLLM 0.6.3 ``LRUEvictor``): oldest ``last_accessed`` first; among equal times the deepest
  block (largest number of hashed tokens) first. Free content-less blocks are used before evicting.
- ``v1`` (vLLM V1 free-block queue): blocks join the queue's tail when freed, a request's blocks in
  reverse order (deepest first); allocation takes from the head.

Shared heads (a speed-up, exact): the full blocks of a prefix group's shared prompt head (``Request.head``) are
held by every running request of the group. While one such table holds them, they are held as one
``HeadHold``: one reference on each head block for all of the group's tables together, a count of the tables and
the latest time any of them touched the head. A table admitted while the hold stands takes it without walking the
head's blocks; the last table to let it go releases the head's blocks as its own free would, the touch times
applied first (they decide the eviction order only once a block is unreferenced). Blocks, references, hits and
eviction order are those of the per-block walk (``tests/test_golden_grid.py``, ``check_integrity``).

Contract: ``free + evictable + used == num_blocks`` always; a referenced block is never evicted;
``check_integrity()`` verifies both.
"""

from __future__ import annotations

import heapq
from typing import cast

from simulator.block_table import AllocStatus, CachedBlock, HeadHold, SeqBlocks, check_references
from simulator.request import Request

__all__ = ["AllocStatus", "BlockCache", "evictable_among", "share_hits"]


def _below(a1: float, a2: int, a3: int, b1: float, b2: int, b3: int) -> bool:
    """(a1, a2, a3) < (b1, b2, b3), field by field (no tuples made)."""
    return a1 < b1 or (a1 == b1 and (a2 < b2 or (a2 == b2 and a3 < b3)))


class BlockCache:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool, variant: str = "v0"):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be ≥ 1")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.prefix_caching, self.variant = prefix_caching, variant
        self.free_hashless = num_blocks
        self.private_used = 0
        self.cached: dict[int, CachedBlock] = {}
        self._heap: list[tuple[float, int, int, list[tuple[float, int, int, int, int]], int]] = []
        # (key1, key2, seq, run, position): a run of (key1, key2, seq, hash, version), ascending
        self._num_evictable = 0
        self._seq = 0
        self.hit_blocks = 0      # cumulative block-granular lookups, as vLLM's hit-rate metric
        self.query_blocks = 0
        self.holds: dict[object, HeadHold] = {}     # a shared head (Request.head) → its hold, while one stands

    # --- counts ----------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: content-less plus evictable cached blocks (vLLM's view)."""
        return self.free_hashless + self._num_evictable

    @property
    def num_evictable(self) -> int:
        return self._num_evictable

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def usage(self) -> float:
        """KV-cache usage as vLLM reports it: 1 − free/total, evictable cached blocks counting as free."""
        return 1.0 - self.num_free / self.num_blocks

    def blocks_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    # --- eviction order --------------------------------------------------------------------------
    # The evictor is a heap of sorted runs: ``free_many`` pushes the newly evictable blocks of the requests it frees
    # as one run sorted by key (v0: last access, then deepest first; v1: the order freed), one heap entry per run
    # at its head. A fresh block takes the head of the lowest run and goes on along that run while its next key
    # stays below every other run's head, so blocks leave in exactly the order one heap entry per block would give.
    # Entries of blocks referenced again since (their version moved) are skipped when reached.
    def _take_fresh_many(self, n: int) -> None:
        """Take n blocks for new content: content-less blocks first, then evictions in order."""
        k = min(n, self.free_hashless)
        self.free_hashless -= k
        need = n - k
        if not need:
            return
        heap, cached = self._heap, self.cached
        while need:
            if not heap:
                raise RuntimeError("BlockCache: no free block (caller must check can_allocate first)")
            run, pos = heap[0][3], heap[0][4]
            # the lowest head among the other runs: one of the root's children (keys compared field by field)
            bounded = len(heap) > 1
            o1, o2, o3 = (heap[1][0], heap[1][1], heap[1][2]) if bounded else (0.0, 0, 0)
            if len(heap) > 2 and _below(heap[2][0], heap[2][1], heap[2][2], o1, o2, o3):
                o1, o2, o3 = heap[2][0], heap[2][1], heap[2][2]
            end = len(run)
            while pos < end:
                e = run[pos]
                pos += 1
                blk = cached.get(e[3])
                if blk is not None and blk.refcount == 0 and blk.version == e[4]:
                    del cached[e[3]]
                    self._num_evictable -= 1
                    need -= 1
                    if not need:
                        break
                if bounded and pos < end and _below(o1, o2, o3, run[pos][0], run[pos][1], run[pos][2]):
                    break
            if pos < end:                   # the run goes on from pos: its entry moves (keys are unique)
                e = run[pos]
                heapq.heapreplace(heap, (e[0], e[1], e[2], run, pos))
            else:
                heapq.heappop(heap)

    # --- admission and allocation ----------------------------------------------------------------
    def can_allocate(self, n_tokens: int, watermark: int) -> AllocStatus:
        """vLLM V0 ``can_allocate``: worst case, ignores prefix sharing."""
        need = self.blocks_for(n_tokens)
        if self.num_blocks - need < watermark:
            return AllocStatus.NEVER
        if self.num_free - need >= watermark:
            return AllocStatus.OK
        return AllocStatus.LATER

    def _ref(self, h: int, now: float) -> None:
        blk = self.cached[h]
        if blk.refcount == 0:
            self._num_evictable -= 1
            blk.version += 1
        blk.refcount += 1
        blk.last_access = now

    def allocate(self, req: Request, n_tokens: int, step: int, now: float) -> SeqBlocks:
        """Allocate the blocks covering the first n_tokens of req (sharing cached full blocks)."""
        n_full = n_tokens // self.block_size
        n_total = self.blocks_for(n_tokens)
        table = SeqBlocks([], 0, now)
        if self.prefix_caching and n_full:
            hashes = req.block_hashes(n_full, self.block_size)
            table.hashes = hashes
            self.query_blocks += n_full
            head = self._head_of(req, n_full)
            hold = self.holds.get(head[0]) if head is not None else None
            start = 0
            if hold is not None:                       # the head is held, hence cached: take the hold
                hold.tables += 1
                hold.last_access = max(hold.last_access, now)
                self.hit_blocks += len(hold.hashes)
                table.hold, start = hold, len(hold.hashes)
            self._share_or_take(hashes, start, step, now)
            if head is not None and hold is None:      # this table's head blocks become the group's hold
                own = hashes[:head[1]]
                table.hold = self.holds[head[0]] = HeadHold(head[0], own, now,
                                                            max(self.cached[h].computed_step for h in own))
        n_private = n_total - len(table.hashes)
        self._take_fresh_many(n_private)
        self.private_used += n_private
        table.n_private += n_private
        req.engine = table
        return table

    def _head_of(self, req: Request, n_full: int) -> tuple[object, int] | None:
        """req's shared head (the key of its hold) and its number of full blocks (at least one), or None."""
        if req.head is None:
            return None
        lead, _ = req.head.chain(req.prompt, self.block_size)
        return (req.head, len(lead)) if 0 < len(lead) <= n_full else None

    def _share_or_take(self, hashes: list[int], start: int, step: int, now: float) -> None:
        """Reference hashes[start:]: cached blocks are shared, the others take fresh blocks."""
        cached = self.cached
        n_full = len(hashes)
        blks = list(map(cached.get, hashes[start:]))
        lead = start + (blks.index(None) if None in blks else len(blks))
        # the leading run of hits takes no fresh block, so nothing is evicted while it is referenced
        revived = 0
        for blk in cast("list[CachedBlock]", blks[:lead - start]):
            if blk.refcount == 0:
                revived += 1
                blk.version += 1
            blk.refcount += 1
            blk.last_access = now
        self._num_evictable -= revived
        self.hit_blocks += lead - start
        # after the first miss, in order: a fresh block may evict a later block of this very table, so a
        # run of misses takes its blocks at once (none of them can be evicted) and what follows is looked
        # up after
        i = lead
        while i < n_full:
            h = hashes[i]
            if h in cached:
                self.hit_blocks += 1
                self._ref(h, now)
                i += 1
                continue
            j = i + 1
            while j < n_full and hashes[j] not in cached:
                j += 1
            self._take_fresh_many(j - i)
            for d in range(i, j):
                cached[hashes[d]] = CachedBlock(d + 1, step, now)
            i = j

    def computed_prefix_tokens(self, req: Request, step: int, cap_tokens: int) -> int:
        """Tokens whose KV can be skipped: the leading run of blocks computed in an earlier step,
        never including the last block of the table (vLLM V0 ``get_computed_block_ids``)."""
        table: SeqBlocks = req.engine
        usable = min(len(table.hashes), table.num_blocks - 1)
        # A block's computed step is fixed while the table holds it, and steps only grow: the run found at an
        # earlier step still holds, so the scan resumes where it stopped (a long chunked prompt would
        # otherwise rescan every block for every chunk).
        n = min(table.computed_run, usable) if step >= table.computed_run_step >= 0 else 0
        if table.hold is not None and table.hold.computed_step < step:     # a held head: every block computed
            n = max(n, min(len(table.hold.hashes), usable))
        cached, hashes = self.cached, table.hashes
        while n < usable and cached[hashes[n]].computed_step < step:
            n += 1
        table.computed_run, table.computed_run_step = n, step
        return min(n * self.block_size, cap_tokens)

    def lookup_hit_blocks(self, req: Request, n_tokens: int) -> int:
        """Leading full blocks of the first n_tokens already cached (no state change)."""
        if not self.prefix_caching:
            return 0
        n = 0
        n_full = n_tokens // self.block_size
        for h in req.hash_memo(n_full, self.block_size)[:n_full]:
            if h not in self.cached:
                break
            n += 1
        return n

    # --- growth ----------------------------------------------------------------------------------
    def append_slot(self, req: Request, n_tokens_after: int, step: int, now: float) -> None:
        """Grow req's table so it covers n_tokens_after tokens (allocating a block when the tail is full)."""
        table: SeqBlocks = req.engine
        grow = -(-n_tokens_after // self.block_size) - len(table.hashes) - table.n_private
        if grow > 0:
            self._take_fresh_many(grow)
            self.private_used += grow
            table.n_private += grow

    def promote_full_blocks(self, req: Request, n_tokens: int, step: int, now: float) -> None:
        """Register the sequence's newly filled blocks under their hashes (vLLM promotion); if the hash
        is already cached, share that block and release the private one."""
        table: SeqBlocks = req.engine
        n_full = n_tokens // self.block_size
        if len(table.hashes) >= n_full or table.n_private == 0 or not self.prefix_caching:
            return
        hs = req.hash_memo(n_full, self.block_size)
        while len(table.hashes) < n_full and table.n_private > 0:
            self._promote(table, hs[len(table.hashes)], step, now)

    def promote_decoded(self, req: Request, nc0: int, n_tokens: int, step_id: int, times: list[float]) -> None:
        """``promote_full_blocks`` of each block a decode run filled, at the step that filled it: the run began with
        ``nc0`` tokens computed, its step i (id step_id + i − 1) ended at times[i]."""
        table: SeqBlocks = req.engine
        bs = self.block_size
        n_full = n_tokens // bs
        if len(table.hashes) >= n_full or table.n_private == 0 or not self.prefix_caching:
            return
        hs = req.hash_memo(n_full, bs)
        while len(table.hashes) < n_full and table.n_private > 0:
            i = max((len(table.hashes) + 1) * bs - nc0, 1)          # the step that filled the block
            self._promote(table, hs[len(table.hashes)], step_id + i - 1, times[i])

    def _promote(self, table: SeqBlocks, h: int, step: int, now: float) -> None:
        table.n_private -= 1
        self.private_used -= 1
        if h in self.cached:
            self._ref(h, now)
            self.free_hashless += 1
        else:
            self.cached[h] = CachedBlock(len(table.hashes) + 1, step, now)
        table.hashes.append(h)

    # --- release ---------------------------------------------------------------------------------
    def free(self, req: Request, now: float) -> None:
        """Release req's blocks: cached ones become evictable at refcount 0 (deepest first)."""
        self.free_many([req], now)

    def free_many(self, reqs: list[Request], now: float) -> None:
        """``free`` of each request in turn. Their newly evictable blocks join the evictor as one run, sorted where
        their keys do not already ascend (requests finishing in one step share their last access and interleave by
        depth): blocks leave in the same order as from a run per request, with far fewer heap moves."""
        cached, v0 = self.cached, self.variant == "v0"
        seq = self._seq
        run: list[tuple[float, int, int, int, int]] = []
        ascending = True
        last1, last2 = -1.0, 0
        for req in reqs:
            table: SeqBlocks | None = req.engine
            if table is None:
                continue
            when = max(table.last_access, 0.0)
            for h in reversed(self._released(table, when)):
                blk = cached[h]
                blk.refcount -= 1
                if blk.last_access < when:
                    blk.last_access = when
                if blk.refcount == 0:
                    seq += 1
                    blk.version += 1
                    k1, k2 = (blk.last_access, -blk.depth) if v0 else (float(seq), 0)
                    if k1 < last1 or (k1 == last1 and k2 < last2):
                        ascending = False
                    last1, last2 = k1, k2
                    run.append((k1, k2, seq, h, blk.version))
            self.private_used -= table.n_private
            self.free_hashless += table.n_private
            req.engine = None
        if run:
            if not ascending:
                run.sort()                  # keys are unique (seq): the order of every key, as the heap would take
            heapq.heappush(self._heap, (run[0][0], run[0][1], run[0][2], run, 0))
        self._num_evictable += seq - self._seq
        self._seq = seq

    def _released(self, table: SeqBlocks, when: float) -> list[int]:
        """The hashes whose reference a table's free lets go of: all of them, or past its head while other tables
        of the group still hold it; the last one releases the head, its blocks touched as the group touched it."""
        hold = table.hold
        if hold is None:
            return table.hashes
        hold.tables -= 1
        hold.last_access = max(hold.last_access, when)
        if hold.tables:
            return table.hashes[len(hold.hashes):]
        for h in hold.hashes:
            blk = self.cached[h]
            blk.last_access = max(blk.last_access, hold.last_access)
        del self.holds[hold.key]
        return table.hashes

    def touch(self, req: Request, now: float) -> None:
        """``access_all_blocks_in_seq``: remember when the sequence was scheduled (O(1); the time
        reaches its blocks when they are freed, the only moment the evictor can see them)."""
        table: SeqBlocks | None = req.engine
        if table is not None:
            table.last_access = now

    # --- contract --------------------------------------------------------------------------------
    def check_integrity(self, live: list[Request] | None = None) -> None:
        refd = sum(1 for b in self.cached.values() if b.refcount > 0)
        evictable = sum(1 for b in self.cached.values() if b.refcount == 0)
        assert all(b.refcount >= 0 for b in self.cached.values()), "negative refcount"
        assert evictable == self._num_evictable, f"evictable {evictable} != counter {self._num_evictable}"
        total = self.free_hashless + evictable + refd + self.private_used
        assert total == self.num_blocks, f"free+evictable+used {total} != {self.num_blocks}"
        if live is not None:
            check_references(self.cached, self.holds, self.private_used, live)


def share_hits(cache: BlockCache, req: Request, n_blocks: int, now: float) -> SeqBlocks:
    """V1 admission: start req's table with its first n_blocks cached blocks (refcounts taken)."""
    table = SeqBlocks([], 0, now)
    if n_blocks:
        for h in req.block_hashes(n_blocks, cache.block_size):
            cache._ref(h, now)
            table.hashes.append(h)
    req.engine = table
    return table


def evictable_among(cache: BlockCache, req: Request, n_blocks: int) -> int:
    """How many of req's first n_blocks cached blocks sit unreferenced (taking them uses free room)."""
    if not n_blocks:
        return 0
    hs = req.hash_memo(n_blocks, cache.block_size)[:n_blocks]
    return sum(1 for h in hs if cache.cached[h].refcount == 0)
