"""Routers: which replica of a cluster serves a request.

A router sees what the real one sees: its own bookkeeping (requests it dispatched that have not finished:
``View.in_flight``) and, where the real router scrapes engine metrics, the replicas' reported state
(``View.waiting`` / ``View.kv_usage``, read through ``View.scrape``). A policy defined on a replica's true
cache contents would say so in its name; none here is.

Each router is chosen by name from ``ROUTERS`` and takes its settings (``--router-set k=v``) as a typed model
whose field names are the real router's own argument names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from simulator.request import Request


class RouterParams(BaseModel):
    """Settings every router has."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    latency_s: float = Field(0.0, ge=0, description="the router's own decision and proxy latency per request")


@dataclass
class View:
    """What a router may read. ``in_flight`` is the router's own count; ``scrape`` returns each replica's
    (waiting requests, KV-cache usage) as its metrics endpoint last reported them."""

    n: int
    in_flight: list[int]
    scrape: Callable[[], tuple[list[int], list[float]]] = field(default=lambda: ([], []))

    def least_loaded(self, among: list[int] | None = None) -> int:
        """The replica with the fewest in-flight requests; ties go to the first (Rust ``min_by_key``)."""
        cand = range(self.n) if among is None else among
        return min(cand, key=lambda k: self.in_flight[k])


class Router(Protocol):
    name: ClassVar[str]

    @property
    def params(self) -> RouterParams: ...

    def route(self, req: Request, view: View, now: float) -> int:
        """The replica index that serves ``req``."""

    def finished(self, req: Request, replica: int, now: float) -> None:
        """``req`` left ``replica`` (completed, failed or timed out)."""

    def check_integrity(self) -> None: ...


class NoRequestState:
    """A router that keeps nothing per request: nothing to forget when one leaves, nothing to check."""

    def finished(self, req: Request, replica: int, now: float) -> None:
        return None

    def check_integrity(self) -> None:
        return None


def parse_params(model: type[BaseModel], name: str, values: dict[str, Any]) -> Any:
    """The router's settings from ``k=v`` pairs; an unknown key or bad value names what is accepted."""
    from pydantic import ValidationError

    from foundation.errors import SpecError
    unknown = sorted(set(values) - set(model.model_fields))
    if unknown:
        raise SpecError(f"router {name}: unknown setting {unknown[0]!r}; accepted: "
                        f"{', '.join(model.model_fields)}")
    try:
        return model.model_validate(values)
    except ValidationError as err:
        e = err.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise SpecError(f"router {name}: {loc}: {e['msg']}") from None
