"""Run CPython's cyclic garbage collector in the slack between planned sends.

With hundreds of open streams the collector's automatic passes take milliseconds (a full pass tens of
milliseconds) and land at arbitrary moments; a pass that lands on a planned send delays it, which is
most of a dispatcher's tail lag. During a replay the pacer turns automatic collection off and runs the
same generational passes itself, at most every ``tick_s``, only when the next planned send is further
away than twice that generation's recent pass time (an older pass that does not fit falls back to a
younger one). If slack never comes (a dense schedule), a generation is collected anyway once its
counter has grown ``force_factor`` times past its threshold, so memory stays bounded. Objects alive
before the replay starts are frozen out of the collector's reach.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import time
from dataclasses import dataclass, field


@dataclass
class SendSchedule:
    """Planned send times (``perf_counter`` seconds) of requests not yet sent: ``next_due`` is the earliest."""

    _heap: list[tuple[float, int]] = field(default_factory=list)
    _sent: set[int] = field(default_factory=set)

    def plan(self, key: int, due: float) -> None:
        heapq.heappush(self._heap, (due, key))

    def sent(self, key: int) -> None:
        self._sent.add(key)

    def next_due(self) -> float:
        while self._heap and self._heap[0][1] in self._sent:
            self._sent.discard(heapq.heappop(self._heap)[1])
        return self._heap[0][0] if self._heap else float("inf")


@dataclass
class GcPacer:
    """Collects generation g only when the next planned send is at least ``margin`` times the recent
    duration of a generation-g pass away (never less than ``min_slack_s``). During the run the young
    generation's threshold is ``young_threshold`` (CPython's 700 makes a pass every few milliseconds
    with hundreds of streams; a pass costs about the same at 5,000, so fewer passes are fewer chances to
    meet a send: dispatch p99 3.4–5.2 → 2.6–3.5 ms in tests/perf/bench_dispatch.py)."""

    schedule: SendSchedule
    tick_s: float = 0.002
    min_slack_s: float = 0.002
    margin: float = 3.0
    young_threshold: int = 5000
    force_factor: int = 20
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    cost_s: list[float] = field(default_factory=lambda: [0.002, 0.01, 0.05])

    def step(self, now: float) -> int | None:
        """One decision: the generation collected now, or None."""
        thresholds, counts = gc.get_threshold(), gc.get_count()
        if counts[0] < thresholds[0]:
            return None
        gen = 2 if (counts[1] >= thresholds[1] and counts[2] >= thresholds[2]) else int(counts[1] >= thresholds[1])
        forced = max((g for g in range(3) if counts[g] >= self.force_factor * thresholds[g]), default=-1)
        slack = self.schedule.next_due() - now
        while gen > max(forced, 0) and slack < self._need(gen):   # a younger pass may fit where an older won't
            gen -= 1
        if gen > forced and slack < self._need(gen):
            return None
        start = time.perf_counter()
        gc.collect(gen)
        self.cost_s[gen] = 0.7 * self.cost_s[gen] + 0.3 * (time.perf_counter() - start)
        self.collections[gen] += 1
        return gen

    def _need(self, gen: int) -> float:
        return max(self.min_slack_s, self.margin * self.cost_s[gen])

    @staticmethod
    def freeze() -> None:
        """Collect once and move every object alive now out of the collector's reach (call before t0)."""
        gc.collect()
        gc.freeze()

    async def run(self, stop: asyncio.Event) -> None:
        was_enabled, thresholds = gc.isenabled(), gc.get_threshold()
        gc.disable()
        gc.set_threshold(self.young_threshold, *thresholds[1:])
        try:
            while not stop.is_set():
                self.step(time.perf_counter())
                await asyncio.sleep(self.tick_s)
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            if was_enabled:
                gc.enable()
