"""SGLang scheduler step log (a diagnostic, off unless ``SERVETWIN_SGLANG_STEPLOG`` names a file prefix).

Put on an SGLang engine's ``PYTHONPATH`` (``SglangCpu(step_log=…)`` does), it wraps three methods of the
scheduler once ``sglang.srt.managers.scheduler`` is imported and writes one JSON line per event to
``<prefix>.<pid>`` (wall-clock seconds, ``time.time()``):

- ``recv``: a request entered the waiting queue (``_add_request_to_queue``): rid, prompt length;
- ``run``: one forward (``run_batch``): start, end, forward mode and, per request, (rid, new tokens,
  cached tokens) for an extend or (rid, sequence length) for a decode — read before the forward runs;
- ``proc``: the processing of a batch's results (``process_batch_result``): start, end, mode, requests.

What it measures is what the simulator's steps stand for: ``python -m calibrate.engine_steps`` sets each
forward against the cost model's price for the same batch. It adds a JSON write per event to the
scheduler's loop (tens of microseconds), nothing per idle poll.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import time
from typing import Any

PREFIX = os.environ.get("SERVETWIN_SGLANG_STEPLOG")
TARGET = "sglang.srt.managers.scheduler"


def _mode(batch: Any) -> str:
    m = batch.forward_mode
    return str(getattr(m, "name", m))


def _requests(batch: Any, mode: str) -> list[list[Any]]:
    if mode in ("EXTEND", "MIXED") and batch.extend_lens is not None:
        lens = zip(batch.reqs, batch.extend_lens, batch.prefix_lens, strict=False)
        return [[r.rid, int(q), int(c)] for r, q, c in lens]
    return [[r.rid, int(r.seqlen)] for r in batch.reqs]


def _patch(mod: Any) -> None:
    sched = mod.Scheduler
    out = open(f"{PREFIX}.{os.getpid()}", "a", buffering=1)   # noqa: SIM115 - lives as long as the process

    def write(d: dict[str, Any]) -> None:
        out.write(json.dumps(d) + "\n")

    add0, run0, proc0 = sched._add_request_to_queue, sched.run_batch, sched.process_batch_result

    def add(self: Any, req: Any, *a: Any, **k: Any) -> Any:
        write({"ev": "recv", "t": time.time(), "rid": req.rid, "prompt": len(req.origin_input_ids)})
        return add0(self, req, *a, **k)

    def run(self: Any, batch: Any, *a: Any, **k: Any) -> Any:
        mode = _mode(batch)
        reqs = _requests(batch, mode)
        t0 = time.time()
        res = run0(self, batch, *a, **k)
        write({"ev": "run", "t0": t0, "t1": time.time(), "mode": mode, "reqs": reqs})
        return res

    def proc(self: Any, batch: Any, result: Any) -> Any:
        t0 = time.time()
        res = proc0(self, batch, result)
        write({"ev": "proc", "t0": t0, "t1": time.time(), "mode": _mode(batch), "n": len(batch.reqs)})
        return res

    sched._add_request_to_queue, sched.run_batch, sched.process_batch_result = add, run, proc


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec0 = loader.exec_module

        def exec_module(module: Any) -> None:
            exec0(module)
            _patch(module)
        loader.exec_module = exec_module        # type: ignore[method-assign]
        return spec


if PREFIX:
    sys.meta_path.insert(0, _Finder())
