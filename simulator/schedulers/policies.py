"""Admission-order policies, chosen by name. Each reorders a list of waiting requests given a function
that returns a request's cached-prefix length; the engine step loop does not change when one is added.

- ``fcfs``: arrival order (the list as it stands).
- ``lpm``: longest cached prefix first (stable sort, SGLang ``calc_priority``).
- ``priority``: earlier agent graph first, then arrival (a DAG-aware order; vLLM's ``priority`` policy
  sorts by (priority, arrival) and the trace's priority is the DAG's arrival order).
- ``lof``: longest output first (SGLang ``lof``).
- ``dfs-weight``: SGLang's radix-DFS order, approximated by grouping requests that share the same
  cached prefix length, largest group first (documented approximation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from simulator.request import Request

MatchFn = Callable[[Request], int]


class Ordering(Protocol):
    def __call__(self, waiting: list[Request], match: MatchFn) -> list[Request]: ...


def fcfs(waiting: list[Request], match: MatchFn) -> list[Request]:
    return list(waiting)


def lpm(waiting: list[Request], match: MatchFn) -> list[Request]:
    keyed = [(match(r), r) for r in waiting]
    return [r for _, r in sorted(keyed, key=lambda x: -x[0])]


def priority(waiting: list[Request], match: MatchFn) -> list[Request]:
    return sorted(waiting, key=lambda r: (r.dag, r.arrival_seq))


def lof(waiting: list[Request], match: MatchFn) -> list[Request]:
    return sorted(waiting, key=lambda r: -r.max_tokens)


def dfs_weight(waiting: list[Request], match: MatchFn) -> list[Request]:
    groups: dict[int, list[Request]] = {}
    for r in waiting:
        groups.setdefault(match(r), []).append(r)
    order = sorted(groups.items(), key=lambda kv: (-len(kv[1]), -kv[0]))
    return [r for _, rs in order for r in rs]


ORDERINGS: dict[str, Ordering] = {"fcfs": fcfs, "lpm": lpm, "priority": priority, "lof": lof,
                                  "dfs-weight": dfs_weight}


def get_ordering(name: str) -> Ordering:
    if name not in ORDERINGS:
        raise KeyError(f"admission order '{name}' unknown; known: {', '.join(ORDERINGS)}")
    return ORDERINGS[name]


def names() -> Iterable[str]:
    return ORDERINGS.keys()
