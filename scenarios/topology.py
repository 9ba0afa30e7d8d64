"""L2 topologies: the requests of one DAG, their roles, predecessors and prompt layout."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scenarios.spec import Chain, FanOut, Mix

PLANNER, WORKER, AGGREGATOR, TURN = 0, 1, 2, 3


@dataclass
class DagShape:
    """Requests of one DAG, relative indices. ``history[i]`` lists earlier requests whose prompt and
    output the prompt of i carries (chains); ``tool[i]`` is the tool class waited on before i (or None)."""

    roles: list[int]
    preds: list[list[int]]
    tool: list[str | None]
    history: list[list[int]] = field(default_factory=list)
    own: list[int | None] = field(default_factory=list)   # a request's own new tokens where not the suffix D
    reply: int | None = None                              # reply tokens carried in history (None: the output)


def fanout_shape(t: FanOut) -> DagShape:
    k = t.workers
    roles = [PLANNER] + [WORKER] * k + [AGGREGATOR]
    preds: list[list[int]] = [[]] + [[0] for _ in range(k)] + [list(range(1, k + 1))]
    tool: list[str | None] = [None] + [t.tool] * k + [None]
    return DagShape(roles, preds, tool, [[] for _ in roles])


def chain_shape(t: Chain) -> DagShape:
    n = t.turns
    roles = [TURN] * n
    preds: list[list[int]] = [[]] + [[i - 1] for i in range(1, n)]
    tool: list[str | None] = [None] + [t.tool] * (n - 1)
    history = [list(range(i)) for i in range(n)]
    own: list[int | None] = [t.first_turn_tokens] + [None] * (n - 1)
    return DagShape(roles, preds, tool, history, own, t.history_reply_tokens)


def choose_shapes(topo: FanOut | Chain | Mix, n_dags: int, rng: np.random.Generator) -> list[DagShape]:
    if isinstance(topo, FanOut):
        s = fanout_shape(topo)
        return [s] * n_dags
    if isinstance(topo, Chain):
        s = chain_shape(topo)
        return [s] * n_dags
    shapes = [fanout_shape(it.topology) if isinstance(it.topology, FanOut) else chain_shape(it.topology)
              for it in topo.items]
    w = np.asarray([it.weight for it in topo.items], dtype=np.float64)
    pick = rng.choice(len(shapes), size=n_dags, p=w / w.sum())
    return [shapes[int(j)] for j in pick]

ROLE_CAPS = ("planner", "worker", "aggregator", "turn")
