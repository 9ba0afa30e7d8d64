"""The dispatcher's garbage-collection pacer and its byte-level SSE parser: collections happen only in
slack before the next planned send (or when memory would otherwise grow without bound), and the
parser yields the same events however the server's bytes are cut into chunks."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest

from live.gc_pacer import GcPacer, SendSchedule
from live.sse import MalformedStream, events


@pytest.fixture
def no_auto_gc():
    was = gc.isenabled()
    old = gc.get_threshold()
    gc.collect()                            # counters start at zero
    gc.disable()
    gc.set_threshold(40, 10, 10)
    yield
    gc.set_threshold(*old)
    if was:
        gc.enable()


def _grow() -> list[list[int]]:
    return [[i] for i in range(50)]          # 50 tracked containers: past a young threshold of 40


def test_schedule_next_due_skips_sent():
    s = SendSchedule()
    s.plan(1, 5.0)
    s.plan(2, 3.0)
    assert s.next_due() == 3.0
    s.sent(2)
    assert s.next_due() == 5.0
    s.sent(1)
    assert s.next_due() == float("inf")


def test_pacer_waits_for_slack(no_auto_gc):
    s = SendSchedule()
    s.plan(1, 100.001)                      # a send 1 ms after "now"
    p = GcPacer(s, min_slack_s=0.004)
    keep = _grow()
    assert p.step(now=100.0) is None and p.collections == [0, 0, 0]
    assert p.step(now=90.0) == 0            # 10 s of slack: the young pass runs
    assert keep


def test_older_pass_falls_back_to_younger_when_it_does_not_fit(no_auto_gc):
    s = SendSchedule()
    s.plan(1, 100.01)                       # 10 ms of slack
    p = GcPacer(s, min_slack_s=0.001, cost_s=[0.001, 0.5, 5.0])   # a generation-1 pass "takes" 0.5 s
    keep = []
    for _ in range(12):                     # ≥ 10 young passes: generation 1 is due
        keep.append(_grow())
        gc.collect(0)
    keep.append(_grow())
    assert gc.get_count()[1] >= 10
    assert p.step(now=100.0) == 0
    assert keep


def test_forced_pass_bounds_memory_without_slack(no_auto_gc):
    s = SendSchedule()
    s.plan(1, 100.0)                        # a send due now: never any slack
    p = GcPacer(s, force_factor=3)
    keep = [_grow() for _ in range(4)]      # young count 200: past 3 × threshold
    assert p.step(now=100.0) == 0
    assert keep


def test_run_restores_automatic_collection():
    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(GcPacer(SendSchedule()).run(stop))
        await asyncio.sleep(0.01)
        assert not gc.isenabled()
        stop.set()
        await task
    was, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    try:
        asyncio.run(go())
        assert gc.isenabled() and gc.get_threshold() == thresholds
    finally:
        if not was:
            gc.disable()


async def _collect(parts: list[bytes]) -> list[object]:
    async def gen():  # type: ignore[no-untyped-def]
        for p in parts:
            yield p
    return [e async for e in events(gen())]


def _wire(n: int, sep: bytes) -> bytes:
    body = b"".join(b"data: " + json.dumps({"choices": [{"text": "x", "token_ids": [k]}]}).encode() + sep + sep
                    for k in range(n))
    return b": keep-alive" + sep + body + b"data: [DONE]" + sep + sep


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("cut", [1, 2, 7, 64, 10_000])
def test_events_independent_of_chunking(sep, cut):
    wire = _wire(5, sep)
    parts = [wire[i:i + cut] for i in range(0, len(wire), cut)]
    got = asyncio.run(_collect(parts))
    assert got[-1] is None and len(got) == 6
    assert [e["choices"][0]["token_ids"][0] for e in got[:-1]] == [0, 1, 2, 3, 4]  # type: ignore[index]


def test_events_last_line_without_newline_and_bad_utf8():
    got = asyncio.run(_collect([b'data: {"choices": []}']))
    assert got == [{"choices": []}]
    with pytest.raises(MalformedStream, match="UTF-8"):
        asyncio.run(_collect([b"data: \xff\xfe\n\n"]))
