"""A trace read from its directory maps its token pool and lets go of it behind the requests issued: same tokens,
same simulated run, and a low-water mark no later request reads below."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from scenarios import compile_trace, pool_map, read_trace, validate_trace, write_trace
from scenarios.trace import SRC_POOL
from simulator import simulate
from tests.conftest import small_scenario
from tests.helpers import mixed_trace


@pytest.fixture
def on_disk(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(pool_map, "RELEASE_BYTES", 1)      # let go at every page, so a run releases many times
    t = compile_trace(small_scenario(duration_s=300, arrivals={"rate": 0.5}))
    write_trace(t, tmp_path / "t")
    return t, read_trace(tmp_path / "t")


def test_a_read_trace_maps_its_pool_and_gives_the_same_prompts_after_letting_go(on_disk):
    t, back = on_disk
    assert back.pool_map is not None and t.pool_map is None
    first = [back.prompt(i).copy() for i in range(back.n_requests)]
    back.done_reading(back.n_requests)                     # every page let go of: read again from the file
    assert back.pool_map.released > 0
    for i in range(t.n_requests):
        assert np.array_equal(first[i], t.prompt(i)) and np.array_equal(back.prompt(i), first[i])
    copy = pickle.loads(pickle.dumps(back))                 # a copy in another process holds the tokens
    assert copy.pool_map is None and np.array_equal(copy.arrays["pool"], t.arrays["pool"])


def test_a_run_from_a_mapped_and_released_pool_is_the_run_from_memory(on_disk):
    """After the validator's pass has let go of the whole pool, the run's own pass lets go again behind it."""
    t, back = on_disk
    pm = back.pool_map
    assert pm is not None
    validate_trace(back)
    full = pm.released
    marks: list[int] = []
    release = pm.release_below

    def spy(token: int) -> None:
        release(token)
        marks.append(pm.released)
    pm.release_below = spy  # type: ignore[method-assign]
    a = simulate(t, "sglang-0.4.1").requests
    b = simulate(back, "sglang-0.4.1").requests
    assert full > 0 and any(0 < m < full for m in marks)
    assert a.equals(b)


def test_the_low_water_mark_is_the_lowest_pool_token_any_later_request_reads():
    t = mixed_trace(3)
    segs, off = t.arrays["segments"], t.arrays["seg_offsets"]
    size = int(t.arrays["pool"].size)
    low = pool_map.low_water(segs, off, SRC_POOL, size)
    starts = [min([int(s[1]) for s in segs[off[i]:off[i + 1]] if s[0] == SRC_POOL], default=size)
              for i in range(t.n_requests)]
    assert low.tolist() == [min(starts[k:], default=size) for k in range(t.n_requests + 1)]
    assert low[-1] == size and (np.diff(low) >= 0).all()


def test_where_the_file_system_cannot_map_the_pool_is_read_whole(on_disk, monkeypatch, tmp_path):
    t, _ = on_disk

    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise OSError("mmap not supported")
    monkeypatch.setattr(pool_map.mmap, "mmap", refuse)
    back = read_trace(tmp_path / "t")
    assert back.pool_map is not None and back.pool_map.released == 0
    back.done_reading(back.n_requests)                     # nothing mapped: nothing to let go of
    assert all(np.array_equal(back.prompt(i), t.prompt(i)) for i in range(t.n_requests))
