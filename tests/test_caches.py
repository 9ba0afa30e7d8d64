"""BlockCache and RadixCache: invariants, eviction order, and agreement at block size 1."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.block_cache import BlockCache
from simulator.radix_cache import RadixCache
from simulator.request import Request, SharedHead
from tests.helpers import in_pure_process


def req(i: int, toks) -> Request:  # type: ignore[no-untyped-def]
    return Request(i, 0, "worker", np.asarray(toks, dtype=np.int32), 4, 0.0, 0.0, i)


def test_block_cache_shares_full_blocks_and_evicts_deepest_first():
    c = BlockCache(10, 4, True, "v0")
    a = req(0, range(12))                 # 3 full blocks
    c.allocate(a, 12, step=0, now=1.0)
    assert c.num_free == 7
    b = req(1, list(range(8)) + [99, 98])  # shares 2 blocks, 1 private tail
    c.allocate(b, 10, step=1, now=2.0)
    assert c.num_free == 6 and c.computed_prefix_tokens(b, 1, 10) == 8
    c.check_integrity([a, b])
    c.free(a, now=3.0)
    c.check_integrity([b])
    assert c.num_evictable == 1           # block 3 of a; blocks 1-2 still held by b
    c.free(b, now=3.0)
    assert c.num_evictable == 3 and c.usage() == 0.0
    # need 8 fresh blocks: 7 content-less first, then the deepest of the oldest cached blocks
    d = req(2, range(100, 132))
    c.allocate(d, 32, step=2, now=4.0)
    remaining = sorted(blk.depth for blk in c.cached.values() if blk.refcount == 0)
    assert remaining == [1, 2]
    c.check_integrity([d])


def test_same_step_hits_do_not_save_compute():
    c = BlockCache(20, 4, True, "v0")
    a, b = req(0, range(16)), req(1, list(range(16)) + [7])
    c.allocate(a, 16, step=5, now=0.0)
    c.allocate(b, 17, step=5, now=0.0)
    assert c.num_free == 20 - 4 - 1          # b shares a's four blocks
    assert c.computed_prefix_tokens(b, 5, 17) == 0
    assert c.computed_prefix_tokens(b, 6, 17) == 16


def test_last_block_always_recomputed():
    c = BlockCache(20, 4, True, "v0")
    a = req(0, range(16))
    c.allocate(a, 16, step=0, now=0.0)
    c.free(a, now=1.0)
    b = req(1, range(16))
    c.allocate(b, 16, step=1, now=2.0)
    assert c.computed_prefix_tokens(b, 1, 16) == 12   # exact multiple: the last full block recomputed


def _radix_hits(seqs):  # type: ignore[no-untyped-def]
    t = RadixCache()
    out = []
    for k, s in enumerate(seqs):
        key = np.asarray(s, dtype=np.int32)
        n, _ = t.match_prefix(key, float(k))
        out.append(n)
        t.insert(key, float(k))
        t.check_integrity()
    return out


def _block_hits(seqs):  # type: ignore[no-untyped-def]
    c = BlockCache(100_000, 1, True, "v0")
    out = []
    for k, s in enumerate(seqs):
        r = req(k, s)
        out.append(c.lookup_hit_blocks(r, len(s)))
        c.allocate(r, len(s), step=k, now=float(k))
        c.free(r, now=float(k))
    return out


seq = st.lists(st.integers(0, 3), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(seqs=st.lists(seq, min_size=1, max_size=25))
def test_radix_and_block_size_1_agree(seqs):
    assert _radix_hits(seqs) == _block_hits(seqs)


@settings(max_examples=100, deadline=None)
@given(seqs=st.lists(seq, min_size=1, max_size=20), locks=st.lists(st.booleans(), min_size=20, max_size=20),
       evict=st.integers(1, 100))
def test_radix_eviction_never_touches_locked(seqs, locks, evict):
    t = RadixCache()
    locked = []
    for k, s in enumerate(seqs):
        key = np.asarray(s, dtype=np.int32)
        t.insert(key, float(k))
        if locks[k]:
            node = t.node_for(key, float(k))
            t.inc_lock_ref(node)
            locked.append(key)
    before = t.protected_size
    t.evict(evict)
    t.check_integrity()
    assert t.protected_size == before
    for key in locked:
        n, _ = t.match_prefix(key, 99.0)
        assert n == len(key)


@settings(max_examples=100, deadline=None)
@given(seqs=st.lists(seq, min_size=1, max_size=20))
def test_radix_insert_path_is_what_a_match_of_the_key_would_touch(seqs):
    """SGLang's cache_unfinished_req inserts a prompt, then matches it again for its node: the path insert collects,
    touched, leaves every node's access counter, and returns the node, as that second match does."""
    a, b = RadixCache(), RadixCache()
    for k, s in enumerate(seqs):
        key = np.asarray(s, dtype=np.int32)
        path: list = []
        assert a.insert(key, float(k), path) == b.insert(key, float(k))
        a.touch(path)
        assert path[-1] is not None and b.node_for(key, float(k)).key.tolist() == path[-1].key.tolist()
        walk = [(nd.key.tolist(), nd.touched) for nd in _nodes(a)]
        assert walk == [(nd.key.tolist(), nd.touched) for nd in _nodes(b)]
        a.check_integrity()


def _nodes(t: RadixCache) -> list:
    out, stack = [], [t.root]
    while stack:
        nd = stack.pop()
        out.append(nd)
        stack.extend(nd.children[k] for k in sorted(nd.children))
    return out


def test_radix_evicts_lru_leaf_first():
    t = RadixCache()
    a = np.asarray([1, 2, 3, 4], np.int32)
    b = np.asarray([1, 2, 9, 9], np.int32)
    t.insert(a, 1.0)
    t.insert(b, 2.0)
    assert t.evict(1) == 2                    # a's leaf [3, 4] is older
    assert t.match_prefix(a, 3.0)[0] == 2 and t.match_prefix(b, 3.0)[0] == 4
    t.check_integrity()


def test_radix_accesses_in_one_instant_keep_their_order():
    """SGLang stamps each access with time.time(): of two leaves touched in the same simulated instant, the
    one touched first is the older, whatever the tree's shape."""
    t = RadixCache()
    a = np.asarray([1, 2, 3, 4], np.int32)
    b = np.asarray([1, 2, 9, 9], np.int32)
    c = np.asarray([5, 6], np.int32)
    for key in (a, b, c):
        t.insert(key, 1.0)
    t.match_prefix(a, 2.0)
    t.match_prefix(c, 2.0)          # then b (untouched since 1.0), a, c
    assert t.evict(1) == 2 and t.match_prefix(b, 3.0)[0] == 2
    t.check_integrity()
    assert t.evict(1) == 2 and t.match_prefix(a, 3.0)[0] == 2      # a's tail next, then [1, 2] is a leaf
    t.check_integrity()


def test_computed_prefix_memo_agrees_with_a_fresh_scan_as_steps_grow():
    """The leading computed run is memoised per table; at every later step it equals a scan from scratch."""
    c = BlockCache(64, 4, True)
    shared = list(range(100, 124))
    reqs = []
    for i, step in enumerate((1, 3, 5)):
        r = req(i, shared[: 8 * (i + 1)] + [500 + i] * 3)
        c.allocate(r, r.fill_len, step, 0.0)
        reqs.append(r)

    def scan(r, step):
        t = r.engine
        n = 0
        for h in t.hashes[:min(len(t.hashes), t.num_blocks - 1)]:
            if c.cached[h].computed_step >= step:
                break
            n += 1
        return n * c.block_size
    for step in range(0, 9):
        for r in reqs:
            assert c.computed_prefix_tokens(r, step, 10**6) == scan(r, step), (r.idx, step)


class _LruReference:
    """vLLM's evictor as a plain scan: the evictable block with the oldest last access, deepest first, then the
    one that became evictable first (v0); or the one freed first (v1)."""

    def __init__(self, num_blocks: int, variant: str):
        self.free, self.variant, self.seq = num_blocks, variant, 0
        self.cached: dict[int, list] = {}             # hash → [refcount, last access, depth, seq freed]

    def _fresh(self) -> None:
        if self.free:
            self.free -= 1
            return
        idle = [(b[1], -b[2], b[3], h) if self.variant == "v0" else (b[3], h)
                for h, b in self.cached.items() if b[0] == 0]
        del self.cached[min(idle)[-1]]

    def allocate(self, hashes: list[int], n_private: int, now: float) -> None:
        for depth, h in enumerate(hashes, start=1):
            if h in self.cached:
                self.cached[h][0] += 1
                self.cached[h][1] = now
            else:
                self._fresh()
                self.cached[h] = [1, now, depth, -1]
        for _ in range(n_private):
            self._fresh()

    def release(self, hashes: list[int], n_private: int, when: float) -> None:
        for h in reversed(hashes):
            b = self.cached[h]
            b[0] -= 1
            b[1] = max(b[1], when)
            if b[0] == 0:
                self.seq += 1
                b[3] = self.seq
        self.free += n_private


HEADS = ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [7] * 8)


@settings(max_examples=300, deadline=None)
@given(variant=st.sampled_from(["v0", "v1"]), held=st.booleans(), data=st.data())
def test_block_evictor_takes_blocks_in_the_reference_order(variant, held, data):
    """Blocks leave in the reference's order, whether the requests that carry a whole shared head take it through
    the group's hold (``held``) or block by block, and whether requests are freed one by one or several at once
    (``free_many``: one sorted run); touches move a table's release time."""
    bs, nb = 2, 24
    c, ref = BlockCache(nb, bs, True, variant), _LruReference(nb, variant)
    shared = [SharedHead(len(h)) for h in HEADS]
    live: list[Request] = []
    for step in range(data.draw(st.integers(5, 60))):
        now = float(step // 3)                         # operations share instants
        if live and data.draw(st.booleans()):              # free one, or several at once as a step's finishes
            gone = [live.pop(data.draw(st.integers(0, len(live) - 1)))
                    for _ in range(min(len(live), data.draw(st.sampled_from([1, 1, 2, 3]))))]
            for r in gone:
                ref.release(list(r.engine.hashes), r.engine.n_private, max(r.engine.last_access, 0.0))
            if len(gone) == 1:
                c.free(gone[0], now)
            else:
                c.free_many(gone, now)
        elif live and data.draw(st.booleans()):
            c.touch(live[data.draw(st.integers(0, len(live) - 1))], now)
        else:
            k = data.draw(st.integers(0, len(HEADS) - 1))
            cut = data.draw(st.one_of(st.just(8), st.integers(0, 8)))       # whole heads often
            toks = HEADS[k][:cut] + data.draw(st.lists(st.integers(10, 13), max_size=6))
            n = len(toks)
            if not n or c.blocks_for(n) > c.num_free:
                continue
            r = Request(step, 0, "worker", np.asarray(toks, dtype=np.int32), 4, 0.0, 0.0, step,
                        head=shared[k] if held and cut == 8 else None)
            c.allocate(r, n, step, now)
            ref.allocate(list(r.engine.hashes), r.engine.n_private, now)
            live.append(r)
        assert set(c.cached) == set(ref.cached)
        assert c.num_evictable == sum(1 for b in ref.cached.values() if b[0] == 0)
        c.check_integrity(live)
    assert not held or all(h.tables > 0 for h in c.holds.values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "match", "evict"]),
                          st.lists(st.integers(0, 1), min_size=1, max_size=6)), min_size=1, max_size=40))
def test_radix_match_holds_while_its_path_is_unchanged(ops):
    """A remembered match (path, stamps, next token) is reused only when a fresh match walks the same path to the
    same length: what sglang's waiting requests rely on between prefill decisions."""
    tree = RadixCache()
    memos: list[tuple[np.ndarray, int, list, list[int], int | None]] = []
    for t, (op, toks) in enumerate(ops):
        key = np.asarray(toks, dtype=np.int32)
        if op == "insert":
            tree.insert(key, t)
        elif op == "evict":
            tree.evict(len(toks))
        else:
            v, path = tree.version, []
            n, _ = tree.match_prefix(key, t, None, None, path)
            if tree.version == v:
                memos.append((key, n, path, [nd.stamp for nd in path], int(key[n]) if n < len(key) else None))
        for k, n, path, stamps, nxt in memos:
            if tree.path_unchanged(path, stamps, nxt):
                v, again = tree.version, []
                m, node = tree.match_prefix(k, t, None, None, again)
                assert tree.version == v and m == n and again == path and node is path[-1]


def test_a_held_head_saves_compute_only_from_the_step_after_it_was_computed():
    c, head = BlockCache(40, 4, True, "v0"), SharedHead(12)
    prompt = list(range(12))
    a, b, d = (Request(i, 0, "worker", np.asarray(prompt + [50 + i] * 5, dtype=np.int32), 4, 0.0, 0.0, i, head=head)
               for i in range(3))
    c.allocate(a, 17, step=3, now=1.0)
    c.allocate(b, 17, step=3, now=1.0)                # joins a's hold in the step that computes the head
    assert b.engine.hold is a.engine.hold and a.engine.hold.tables == 2
    assert c.computed_prefix_tokens(b, 3, 17) == 0    # same-step hits save nothing
    c.allocate(d, 17, step=4, now=2.0)
    assert c.computed_prefix_tokens(d, 4, 17) == 12   # the head's 3 blocks, never the table's last
    c.check_integrity([a, b, d])
    for r in (a, b, d):
        c.free(r, now=3.0)
    assert not c.holds and c.num_evictable == 6 and all(blk.refcount == 0 for blk in c.cached.values())
    c.check_integrity([])


def test_a_run_is_the_same_with_and_without_head_holds():
    in_pure_process("tests.test_caches:same_with_and_without_head_holds")   # it patches BlockCache


def same_with_and_without_head_holds() -> None:
    """Whole runs with prefix groups and preemptions (small pools), vLLM 0.6.3 unchunked and chunked: the same
    requests, times and telemetry whether shared heads are held or walked block by block."""
    import pandas as pd

    from scenarios import compile_trace
    from simulator import simulate
    from tests.conftest import small_scenario
    trace = compile_trace(small_scenario(duration_s=90, arrivals={"rate": 1.2},
                                         prompts={"length": 1024, "sharing": 0.9, "prefix_groups": 3}))
    for over in ({"enable_prefix_caching": True, "num_gpu_blocks": 260},
                 {"enable_prefix_caching": True, "num_gpu_blocks": 260, "enable_chunked_prefill": True,
                  "max_num_batched_tokens": 512}):
        held = simulate(trace, "vllm-0.6.3", overrides=over, context=2048, check_every=1)
        orig = BlockCache._head_of
        BlockCache._head_of = lambda self, req, n_full: None  # type: ignore[method-assign,assignment]
        walked = simulate(trace, "vllm-0.6.3", overrides=over, context=2048, check_every=1)
        BlockCache._head_of = orig  # type: ignore[method-assign]
        assert held.meta["telemetry_summary"]["preemptions"] > 0
        pd.testing.assert_frame_equal(pd.DataFrame(held.requests), pd.DataFrame(walked.requests))
        pd.testing.assert_frame_equal(pd.DataFrame(held.telemetry), pd.DataFrame(walked.telemetry))
