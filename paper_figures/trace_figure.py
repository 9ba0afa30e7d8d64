"""A trace over time: requests per minute and each request's prompt and output lengths at its arrival
(``servetwin trace show TRACE --figure out.png``); written atomically, same trace → same bytes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from paper_figures.style import new, save
from scenarios.trace import Trace


def trace_figure(trace: Trace, out: str | Path) -> Path:
    a = trace.arrays
    roots = np.diff(a["pred_offsets"]) == 0
    t = a["arrival_s"] + np.where(roots, a["delay_s"], 0.0)      # a dependant's recorded offset is its gap
    fig, ax = new(7.0, 5.0, 1)
    fig.clf()
    top, bottom = fig.subplots(2, 1, sharex=True)
    per_min = np.bincount((t // 60).astype(np.int64))
    top.step(np.arange(per_min.size) + 0.5, per_min, where="mid", color="#1f6fb4")
    top.set_ylabel("requests per minute")
    lens = trace.prompt_lengths()
    bottom.scatter(t / 60, lens, s=3, color="#1f6fb4", label="prompt tokens", alpha=0.5, linewidths=0)
    bottom.scatter(t / 60, a["max_tokens"], s=3, color="#d1495b", label="output tokens", alpha=0.5, linewidths=0)
    bottom.set_yscale("log")
    bottom.set_xlabel("minutes since the first request (dependants at their issue offset)")
    bottom.set_ylabel("tokens")
    bottom.legend(loc="upper right", markerscale=4)
    name = trace.manifest["scenario"]["name"]
    top.set_title(f"{name}: {trace.n_requests} requests, {trace.n_dags} graphs", fontsize=9)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=out.parent)
    os.close(fd)
    try:
        save(fig, Path(tmp))
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
