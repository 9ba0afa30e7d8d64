"""What the simulator's trees share: SGLang's radix cache (simulator.radix_cache) and its router's tenant tree
(simulator.routers.tenant_tree) are both nodes with a ``children`` mapping."""

from __future__ import annotations

from typing import TypeVar

N = TypeVar("N")


def descendants(root: N) -> list[N]:
    """Every node of the tree under ``root``, ``root`` included (depth first, no order promised)."""
    out, stack = [], [root]
    while stack:
        nd = stack.pop()
        out.append(nd)
        stack.extend(nd.children.values())  # type: ignore[attr-defined]
    return out
