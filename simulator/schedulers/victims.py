"""Preemption-victim choice, by name: which running request gives its KV back when a step cannot grow.
Each policy returns the index of the victim among the candidates, given in running order (the order the
scheduler admitted them). Each engine's default is its own rule; the others are what-ifs.

- ``newest``: the last in running order — vLLM 0.6.3 (``vllm/core/scheduler.py``
  ``Scheduler._schedule_running``: ``running_queue.pop()``) and V1 (``vllm/v1/core/sched/scheduler.py``
  ``Scheduler.schedule``: ``self.running.pop()``), preempted by recompute.
- ``fewest_decoded``: the fewest output tokens, then the longest prompt, ties to the later in running order —
  SGLang's ``ScheduleBatch.retract_decode`` (``python/sglang/srt/managers/schedule_batch.py``: running
  requests sorted by ``(len(output_ids), -len(origin_input_ids))``, reversed, popped from the end).
- ``oldest``: the first in running order (a what-if).
- ``most_kv``: the most KV held (its context), ties to the later (a what-if: frees the most per preemption).

vLLM's victims are chosen among the requests its step has not yet scheduled (the request that needs room
included), as its own loop does: one already scheduled this step is not taken back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simulator.request import Request

Chooser = Callable[[Sequence[Request]], int]


def _last_min(cands: Sequence[Request], key: Callable[[Request], tuple[int, ...]]) -> int:
    best = 0
    for i in range(1, len(cands)):
        if key(cands[i]) <= key(cands[best]):
            best = i
    return best


def newest(cands: Sequence[Request]) -> int:
    return len(cands) - 1


def oldest(cands: Sequence[Request]) -> int:
    return 0


def fewest_decoded(cands: Sequence[Request]) -> int:
    return _last_min(cands, lambda r: (r.output_len, -r.prompt_len))


def most_kv(cands: Sequence[Request]) -> int:
    return _last_min(cands, lambda r: (-r.context_len,))


VICTIMS: dict[str, Chooser] = {"newest": newest, "fewest_decoded": fewest_decoded, "oldest": oldest,
                               "most_kv": most_kv}


def get_victim(name: str) -> Chooser:
    if name not in VICTIMS:
        raise KeyError(f"preemption victim '{name}' unknown; known: {', '.join(VICTIMS)}")
    return VICTIMS[name]
