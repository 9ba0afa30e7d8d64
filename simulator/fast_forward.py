"""Decode fast-forward: a run of pure-decode steps that nothing can change, advanced in one SimPy event.

Between the events that change a batch — a request reaching the engine, a prefill the scheduler would admit, a
request finishing, a block the growth would lack (preemption), a client abort — an engine's steps are pure
decodes of the same requests, each adding one token per request. Their durations are the cost model's for the
same sums a step-by-step run would build (context grows by one token per request per step; distinct KV by the
blocks the step allocates), so a run of K such steps can be priced at once (``CostModel.decode_step_times``,
the same operations as one ``step_time`` call per step) and its state applied once per request (tokens, blocks,
promotions at the step and time they happen), instead of K scheduler passes over every request.

Each engine family states when its next steps are such a run (``decode_run``) and applies the first k of them
(``apply_decode_run``); a family without them runs step by step. A run may end with the step in which its first
requests finish (vLLM 0.6.3, SGLang): that step is applied up to its tokens and completed by the scheduler's own
``complete`` when it ends (finishes, frees, deliveries, its telemetry sample), as a step-by-step run would.
The replica prices a run to its end and waits;
events elsewhere on the clock (another replica's steps, a tool call, a delivery) leave it alone. When something
acts on or reads the engine before the run ends — a request handed to it, a client abort, a router scraping its
metrics — the replica first applies the run up to the step then in progress (``Replica.settle``) and resumes
step by step when that step ends, so every step-by-step observation (times, telemetry samples, step counts) is
reproduced: `--no-fast-forward` keeps the reference step-by-step mode, and tests/test_fast_forward.py compares
the two on random scenarios, single engines and clusters.

Implemented: vLLM 0.6.3 (V0, chunked and unchunked, FCFS), vLLM V1 (FCFS) and SGLang (a GPU's overlap
scheduler and none; a CPU's inline forward runs step by step).
"""

from __future__ import annotations

from typing import Protocol

from simulator.request import Request


class DecodeRun(Protocol):
    """The run the scheduler would take next: its batch (in order), Σ context at its first step, and per step
    what a step-by-step run would read (``states``)."""

    reqs: list[Request]
    ctx0: int

    def states(self, i: int, m: int) -> tuple[list[int], list[float]]:
        """Steps i … i + m − 1 (fewer where the run cannot go on): the decodes' distinct KV tokens after each
        is scheduled and the KV usage after each completes (as the engine computes it)."""
        ...

    def valid(self, k: int) -> bool:
        """Whether the first k steps may be applied at once (checked once k is known)."""
        ...
