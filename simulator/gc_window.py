"""Fewer garbage collections while a simulation runs: the run allocates millions of short-lived objects (events,
tuples, token lists) and holds long-lived ones (trees, tables, requests in flight), so CPython's default young
threshold (700 allocations) collects, and every tenth time rescans the older generation, thousands of times a run
(about a tenth of its time on a cluster). A young threshold of 50,000 keeps at most that many uncollected young
objects (a few MB) and leaves results unchanged: nothing in the simulator depends on when a collection happens.
The caller's thresholds come back when the run ends; a process that switched thresholds off keeps them off."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 50_000


@contextmanager
def fewer_collections(young: int = YOUNG) -> Iterator[None]:
    old = gc.get_threshold()
    if old[0] == 0 or old[0] >= young:
        yield
        return
    gc.set_threshold(young, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
