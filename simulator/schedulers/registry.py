"""Schedulers by engine family: the replica gets its scheduler from a resolved configuration's ``family``;
a new engine family registers its class here (and its configuration model in ``simulator.config``)."""

from __future__ import annotations

from typing import Any

from simulator.schedulers.base import Scheduler
from simulator.schedulers.sglang import SglangScheduler
from simulator.schedulers.vllm_v0 import VllmV0Scheduler
from simulator.schedulers.vllm_v1 import VllmV1Scheduler

_CHECKED: tuple[type[Scheduler], ...] = (VllmV0Scheduler, VllmV1Scheduler, SglangScheduler)   # mypy: each one
SCHEDULERS: dict[str, Any] = {cls.family: cls for cls in _CHECKED}                          # is a Scheduler


def make_scheduler(cfg: Any) -> Scheduler:
    """The scheduler of ``cfg.family``; an unknown family is refused naming the known ones."""
    family = getattr(cfg, "family", None)
    if family not in SCHEDULERS:
        raise KeyError(f"engine family {family!r} has no scheduler; known: {', '.join(SCHEDULERS)}")
    sched: Scheduler = SCHEDULERS[family](cfg)
    return sched
