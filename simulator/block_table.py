"""A BlockCache's per-block and per-table state (simulator/block_cache.py): a cached block, a sequence's block table,
a shared head's hold, and the contract between live tables and the references the cache counts."""

from __future__ import annotations

from enum import Enum

from simulator.request import Request


class AllocStatus(Enum):
    OK = 0
    LATER = 1
    NEVER = 2


class CachedBlock:
    __slots__ = ("refcount", "last_access", "depth", "computed_step", "version")

    def __init__(self, depth: int, step: int, now: float):
        self.refcount = 1
        self.last_access = now
        self.depth = depth
        self.computed_step = step
        self.version = 0


class SeqBlocks:
    """A sequence's block table: the hashes of its cached full blocks, then ``n_private`` blocks."""

    __slots__ = ("hashes", "n_private", "last_access", "computed_run", "computed_run_step", "hold")

    def __init__(self, hashes: list[int], n_private: int, last_access: float = 0.0):
        self.hashes = hashes
        self.n_private = n_private
        self.last_access = last_access    # when the sequence was last scheduled; written to its blocks at free
        self.computed_run = 0             # leading blocks known computed before computed_run_step (a memo)
        self.computed_run_step = -1
        self.hold: HeadHold | None = None  # its leading blocks are its group's shared head, held through this

    @property
    def num_blocks(self) -> int:
        return len(self.hashes) + self.n_private


class HeadHold:
    """One reference on each full block of a shared head for every table of the group that holds it
    (simulator/block_cache.py, "Shared heads")."""

    __slots__ = ("key", "hashes", "tables", "last_access", "computed_step")

    def __init__(self, key: object, hashes: list[int], now: float, computed_step: int):
        self.key = key
        self.hashes = hashes
        self.tables = 1
        self.last_access = now
        self.computed_step = computed_step   # the latest step any head block was computed in (fixed while held)


def check_references(cached: dict[int, CachedBlock], holds: dict[object, HeadHold], private_used: int,
                     live: list[Request]) -> None:
    """A BlockCache's blocks against its live tables: every live table's blocks are cached; each block's reference
    count is the live tables' references to it (a standing head hold counting once for all its tables); the
    private blocks add up."""
    refs: dict[int, int] = {}
    priv = 0
    holders: dict[int, int] = {}
    for r in live:
        t: SeqBlocks | None = r.engine
        if t is None:
            continue
        priv += t.n_private
        skip = 0
        if t.hold is not None:
            assert holds.get(t.hold.key) is t.hold, "a live table's head hold is not standing"
            assert t.hashes[:len(t.hold.hashes)] == t.hold.hashes, "a head hold over other blocks"
            holders[id(t.hold)] = holders.get(id(t.hold), 0) + 1
            skip = len(t.hold.hashes)
        for h in t.hashes:
            assert h in cached, "a live sequence references an evicted block"
        for h in t.hashes[skip:]:
            refs[h] = refs.get(h, 0) + 1
    for hold in holds.values():
        assert holders.get(id(hold), 0) == hold.tables > 0, "a head hold's count differs from its tables"
        for h in hold.hashes:
            refs[h] = refs.get(h, 0) + 1
    assert priv == private_used, f"private blocks {priv} != {private_used}"
    for h, b in cached.items():
        assert b.refcount == refs.get(h, 0), "refcount differs from live references"
