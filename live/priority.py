"""The load generator's CPU priority when it shares cores with the engine it measures.

On a small host a local engine's busy-polling processes can keep the client off a CPU for tens to
hundreds of milliseconds (measured here: vLLM's CPU build polls its shared-memory queues with
``sched_yield`` while a step runs; on this kernel the client, woken to send a request or read a chunk,
waited up to 140 ms behind that loop). The client's timestamps then include its own queueing, not the
engine's. ``realtime_client`` puts the calling thread (the event loop) in ``SCHED_FIFO`` with
``SCHED_RESET_ON_FORK``, so that it runs as soon as a socket is ready, while every process and thread it
starts afterwards (an engine it launches, helper threads) is back at normal priority. The client does a
few percent of a CPU of I/O-driven work; the kernel's real-time throttling leaves the rest of each second
to others even if it misbehaved. Linux only; it needs root or ``CAP_SYS_NICE``.
"""

from __future__ import annotations

import os

FIFO_PRIORITY = 1            # the lowest real-time priority: above every normal task, below kernel threads


def realtime_client(priority: int = FIFO_PRIORITY) -> str:
    """Put the calling thread in SCHED_FIFO (reset on fork). Returns the policy now in force ("fifo") or,
    when it cannot, why not; the caller's work goes on at normal priority either way."""
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_RESET_ON_FORK"):
        return "normal (this system has no SCHED_FIFO)"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except PermissionError:
        return "normal (SCHED_FIFO needs root or CAP_SYS_NICE)"
    except OSError as err:
        return f"normal (SCHED_FIFO refused: {err.strerror})"
    return client_scheduling()


def client_scheduling() -> str:
    """The calling thread's scheduling policy in words: "fifo", "rr" or "normal"."""
    if not hasattr(os, "sched_getscheduler"):
        return "normal"
    policy = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    return {getattr(os, "SCHED_FIFO", -1): "fifo", getattr(os, "SCHED_RR", -2): "rr"}.get(policy, "normal")
