"""Routers by name (``--router NAME``), with their settings' models (``--router-set k=v``)."""

from __future__ import annotations

from typing import Any

from foundation.errors import SpecError
from simulator.routers.base import Router, parse_params
from simulator.routers.cache_aware import CacheAware
from simulator.routers.scored import Scored
from simulator.routers.simple import LeastOutstanding, Random, RoundRobin, Session

_CHECKED: tuple[type[Router], ...] = (RoundRobin, Random, LeastOutstanding, Session, CacheAware, Scored)
ROUTERS: dict[str, Any] = {cls.name: cls for cls in _CHECKED}


def make_router(name: str, settings: dict[str, Any], n: int, seed: int) -> Router:
    """The router ``name`` for ``n`` replicas; an unknown name or setting is refused naming what is known."""
    if name not in ROUTERS:
        raise SpecError(f"router {name!r} is not known; known: {', '.join(ROUTERS)}")
    cls = ROUTERS[name]
    router: Router = cls(parse_params(cls.Params, name, settings), n, seed)
    return router
