"""Up-front limits: a scenario's trace is sized before anything is allocated, and one larger than the limits
is refused with one line instead of allocating until the machine runs out of memory.

The limits are the environment variables ``SERVETWIN_MAX_REQUESTS`` (default 2,000,000 requests) and
``SERVETWIN_MAX_TRACE_GIB`` (default 8 GiB of arrays and token ids); raise them to compile larger traces on a
machine with the memory for them. The estimate uses the expected number of DAG arrivals (rate × duration) and
the largest DAG of the topology, so it errs on the large side.
"""

from __future__ import annotations

import os

from foundation.errors import SpecError
from scenarios.spec import Chain, FanOut, Scenario
from scenarios.topology import chain_shape, fanout_shape

DEFAULT_MAX_REQUESTS = 2_000_000
DEFAULT_MAX_GIB = 8.0
BYTES_PER_REQUEST = 600          # the compiler's per-request rows and Python lists while it builds them
BYTES_PER_TOKEN = 12             # drawn as int64, stored as int32


def _env_limit(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        v = float(raw)
    except ValueError:
        raise SpecError(f"{name}={raw!r}: expected a positive number") from None
    if not v > 0:
        raise SpecError(f"{name}={raw!r}: expected a positive number")
    return v


def _dag_sizes(sc: Scenario) -> tuple[int, int, int]:
    """(requests, own-token rows, output tokens carried as history) of the topology's largest DAG."""
    topo = sc.topology
    items = [topo] if isinstance(topo, FanOut | Chain) else [it.topology for it in topo.items]
    best = (0, 0, 0)
    for t in items:
        shape = fanout_shape(t) if isinstance(t, FanOut) else chain_shape(t)
        carried = len({h for hs in shape.history for h in hs}) * max(sc.outputs.turn, sc.outputs.aggregator)
        best = max(best, (len(shape.roles), len(shape.roles), carried))
    return best


def estimate(sc: Scenario) -> tuple[float, float]:
    """(requests, bytes) the compiled trace is expected to take at most."""
    dags = len(sc.arrivals.times) if sc.arrivals.kind == "replay" else sc.arrivals.rate * sc.duration_s
    per_dag, rows, carried = _dag_sizes(sc)
    requests = dags * per_dag
    tokens = sc.prompts.F + dags * (sc.prompts.dag_context_tokens + rows * sc.prompts.D + carried)
    return requests, requests * BYTES_PER_REQUEST + tokens * BYTES_PER_TOKEN


def check_size(sc: Scenario) -> None:
    max_req = _env_limit("SERVETWIN_MAX_REQUESTS", DEFAULT_MAX_REQUESTS)
    max_gib = _env_limit("SERVETWIN_MAX_TRACE_GIB", DEFAULT_MAX_GIB)
    requests, size = estimate(sc)
    gib = size / 1024**3
    if requests > max_req or gib > max_gib:
        raise SpecError(f"scenario '{sc.name}': its trace would hold about {requests:,.0f} requests and "
                        f"{gib:,.1f} GiB (arrivals.rate × duration_s × requests per DAG); the limits are "
                        f"{max_req:,.0f} requests and {max_gib:g} GiB — lower the rate or duration_s, or raise "
                        "SERVETWIN_MAX_REQUESTS / SERVETWIN_MAX_TRACE_GIB")
