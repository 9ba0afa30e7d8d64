"""An engine's front end as one event loop: the API server that takes each request in and streams each
step's tokens out.

vLLM's API server (its ``AsyncLLM``) runs both on one asyncio loop: a request's HTTP handling and input
processing, and the output handler that, as soon as the engine core returns a step, takes that step's
outputs in, processes them and lets each stream write its chunk. Where a profile measured it
(``Overheads.front_end_step_s`` or ``stream_chunk_s`` > 0) the twin models that loop:

- each request takes ``request_s`` of the loop's time, in order of arrival (a request sent behind another
  is taken in after it);
- each step with outputs takes ``front_end_step_s`` of it, ahead of any request's work (the output handler
  runs whenever a step's outputs arrive; a request's handling resumes after), in the order steps end;
- the step's streams then reach the client one after another, ``stream_chunk_s`` apart (stream ``i``,
  0-based in batch order, ``(i + 1) * stream_chunk_s`` after the loop is done with the step; plus the
  output path's ``deliver_s``). That spacing delays the tokens, not the loop: measured here it is mostly
  the client reading one stream after another.

So a request sent while others stream reaches the scheduler later than one sent to an idle engine, by the
output work the loop did meanwhile, and a request sent behind others waits for theirs. With both at 0 the
front end is a fixed latency per request (``request_s``, any number at once), as before. Uncertain: how
much of ``request_s`` is the loop's own time and how much the hand-off to the engine core (its input
thread, another process) — the model counts all of it as the loop's — and whether the loop's time per step
grows with its streams (fitted as a constant: docs/engines.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Intake:
    """One request's input processing on the loop: ``done_at`` moves later while output work preempts it."""

    done_at: float


class FrontEnd:
    """The loop's queue of work: requests' input processing (FIFO) behind each step's output work (FIFO)."""

    def __init__(self, request_s: float, step_s: float, chunk_s: float):
        if min(request_s, step_s, chunk_s) < 0:
            raise ValueError(f"front end: request_s {request_s}, step_s {step_s} and chunk_s {chunk_s} must be >= 0")
        self.request_s, self.step_s, self.chunk_s = request_s, step_s, chunk_s
        self.out_until = 0.0          # the output work queued so far is done at this time
        self.pending: list[Intake] = []   # requests not yet handed to the scheduler, in arrival order

    def take_in(self, now: float) -> Intake:
        """A request arrives: its processing starts after the requests ahead of it and the output work
        queued before it (contiguous from now on: every piece of it began at or before now)."""
        ahead = self.pending[-1].done_at if self.pending else now
        intake = Intake(max(now, ahead, self.out_until) + self.request_s)
        self.pending.append(intake)
        return intake

    def handed_over(self, intake: Intake) -> None:
        """The request reached the scheduler (or timed out): it no longer waits on the loop."""
        self.pending.remove(intake)

    def stream(self, now: float) -> float:
        """A step with outputs ended at ``now``: when the loop is done with it (its streams then reach the
        client ``written_at``). Every request still being taken in after the loop starts on it waits for it."""
        start = max(now, self.out_until)
        self.out_until = start + self.step_s
        for intake in self.pending:
            if intake.done_at > start:
                intake.done_at += self.step_s
        return self.out_until

    def written_at(self, done: float, i: int) -> float:
        """When stream ``i`` of a step the loop was done with at ``done`` reached the client."""
        return done + (i + 1) * self.chunk_s

    def check_integrity(self) -> None:
        done = [p.done_at for p in self.pending]
        assert done == sorted(done), "front end: requests would be handed over out of arrival order"
