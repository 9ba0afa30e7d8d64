"""SGLang's scheduler step log (``SglangCpu(step_log=PREFIX)``; written by ``live/sglang_cpu/steplog``, one file
per scheduler process, ``PREFIX.<pid>``): its events parsed and in time order, and each forward paired with the
interval in which its results were processed. What the calibration library measures from it is in
``calibrate/step_log.py``; vLLM's iteration log is read by ``live/vllm_steplog.py``."""

from __future__ import annotations

import functools
import glob
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from foundation.errors import ServetwinError


def read_events(prefix: str | Path) -> list[dict[str, Any]]:
    """Every event of a step log's files (one per scheduler process), in time order. A log is parsed once
    per version of its files (the twin study prices every run of an instance against the same log); the
    events are shared, so callers must not change them."""
    files = sorted(glob.glob(f"{prefix}.*"))
    if not files:
        raise ServetwinError(f"no step log at {prefix}.<pid> (start SGLang with SglangCpu(step_log=...))")
    return list(_parse(tuple((f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files)))


@functools.lru_cache(maxsize=8)
def _parse(files: tuple[tuple[str, int, int], ...]) -> tuple[dict[str, Any], ...]:
    events = []
    for f, _, _ in files:
        for n, line in enumerate(Path(f).read_text().splitlines(), 1):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ServetwinError(f"{f}:{n}: not a step-log line ({err.msg})") from None
    return tuple(sorted(events, key=lambda e: e.get("t0", e.get("t", 0.0))))


def with_processing(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log's forwards, each with the interval in which its results were processed (``p0``, ``p1``: the
    scheduler processes batches in the order it ran them)."""
    runs = [e for e in events if e.get("ev") == "run"]
    procs = [e for e in events if e.get("ev") == "proc"]
    out = []
    for k, e in enumerate(runs):
        p = procs[k] if k < len(procs) else None
        if p is not None and (p["mode"] != e["mode"] or p["n"] != len(e["reqs"])):
            raise ServetwinError(f"step log: the forward at {e['t0']:.3f} ({e['mode']}, {len(e['reqs'])} requests) "
                                 f"and the result processing at {p['t0']:.3f} ({p['mode']}, {p['n']}) do not pair")
        out.append({**e, "p0": p["t0"] if p else np.nan, "p1": p["t1"] if p else np.nan})
    return out
