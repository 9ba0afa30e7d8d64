"""An SGLang engine's step log (``SglangCpu(step_log=PREFIX)``, live/sglang_cpu/steplog) read on a live
run's clock: its forwards with the requests renamed to the run's records, when each result was processed,
when each request was received; and the two latencies of the engine outside its forwards that the log
shows — the front end's and the output path's (``path_latencies``), which a profile carries as
``request_s`` and ``deliver_s`` (``write_latencies``).

Step-log requests are matched to the run's records in order of arrival: the k-th request the scheduler
received in the run's window is the k-th the client sent (front-end reordering of requests sent within a
few milliseconds of each other would swap two of them; both then carry the same shape).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from analysis.records import RunRecord, read_run
from foundation.errors import ServetwinError
from live.sglang_steplog import read_events, with_processing


def live_window(events: list[dict[str, Any]], run: RunRecord) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """The run's forwards on the records' clock, with engine request ids renamed to the records' ids, and
    when the scheduler received each request."""
    win = run.meta["run_window"]
    if "start_unix" not in win:
        raise ServetwinError(f"{run.path}: run.json has no run_window.start_unix (recorded before 0.5)")
    t0, end = float(win["start_unix"]), float(win.get("end_s") or win["duration_s"])
    recv = [e for e in events if e.get("ev") == "recv" and 0.0 <= e["t"] - t0 <= end]
    sent = run.requests.dropna(subset=["send_s"]).sort_values("send_s")
    if len(recv) != len(sent):
        raise ServetwinError(f"{run.path}: the step log received {len(recv)} requests in the run's window, "
                             f"the records sent {len(sent)}; is it this instance's log?")
    ids = dict(zip((e["rid"] for e in recv), sent["request_id"].astype(int), strict=True))
    runs = []
    for e in with_processing(events):
        if 0.0 <= e["t0"] - t0 <= end + 5.0:
            reqs = [[ids[r[0]], *r[1:]] for r in e["reqs"] if r[0] in ids]
            if reqs:
                runs.append({**e, "reqs": reqs, **{k: e[k] - t0 for k in ("t0", "t1", "p0", "p1")}})
    return runs, {ids[e["rid"]]: e["t"] - t0 for e in recv}


def path_latencies(runs: list[dict[str, Any]], received: dict[int, float], requests: pd.DataFrame) -> dict[str, Any]:
    """The engine's own latencies outside its forwards, from its step log: ``inbound`` — send to the
    scheduler's receipt, over requests that found the scheduler idle (no forward or result processing
    under way: its front end alone); ``outbound`` — the processing of a request's prefill results to its
    first token at the client (the output path). Medians in seconds, with how many requests each."""
    busy = sorted([(e["t0"], e["t1"]) for e in runs] + [(e["p0"], e["p1"]) for e in runs if np.isfinite(e["p0"])])
    starts = np.array([b[0] for b in busy])
    ends = np.maximum.accumulate(np.array([b[1] for b in busy])) if busy else np.array([])
    send = dict(zip(requests["request_id"].astype(int), requests["send_s"], strict=True))
    inbound = []
    for i, t in received.items():
        k = int(np.searchsorted(starts, t))                   # busy intervals starting before the receipt
        if k == 0 or ends[k - 1] <= send[i]:
            inbound.append(t - send[i])
    first = dict(zip(requests["request_id"].astype(int), requests["first_token_s"], strict=True))
    outbound = [first[r] - e["p1"] for r, e in prefill_ends(runs, requests).items()
                if np.isfinite(e["p1"]) and np.isfinite(first[r])]
    return {"inbound_s": float(np.median(inbound)) if inbound else np.nan, "inbound_n": len(inbound),
            "outbound_s": float(np.median(outbound)) if outbound else np.nan, "outbound_n": len(outbound)}


def prefill_ends(runs: list[dict[str, Any]], requests: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Each request's forward that computed its last prompt token."""
    prompt = dict(zip(requests["request_id"].astype(int), requests["prompt_tokens"].astype(int), strict=True))
    done: dict[int, dict[str, Any]] = {}
    for e in runs:
        for r in e["reqs"]:
            if len(r) == 3 and r[0] not in done and r[1] + r[2] >= prompt.get(r[0], 1 << 30):
                done[r[0]] = e
    return done


def measured_latencies(run_dir: str | Path, prefix: str | Path) -> dict[str, Any]:
    """``path_latencies`` of one live run from its instance's step log."""
    run = read_run(run_dir)
    runs, received = live_window(read_events(prefix), run)
    return path_latencies(runs, received, run.requests)


def write_measured(hardware_yaml: str | Path, out: str | Path, family: str,
                   values: dict[str, tuple[float, str]]) -> Path:
    """Copy a profile YAML with some of one engine family's overheads set as measured (name → (value,
    source))."""
    data = yaml.safe_load(Path(hardware_yaml).read_text())
    ovh = data.setdefault("cost", {}).setdefault("overheads", {})
    if family not in ovh:
        raise ServetwinError(f"{hardware_yaml}: no overheads for engine family {family!r}; it has {sorted(ovh)}")
    for key, (value, source) in values.items():
        ovh[family][key] = {"value": round(float(value), 6), "basis": "measured", "source": source}
    from calibrate.fit import dump_profile
    return dump_profile(out, data)


def write_latencies(hardware_yaml: str | Path, out: str | Path, family: str, lat: dict[str, Any], source: str) -> Path:
    """Copy a profile YAML with the front end's (``request_s``) and the output path's (``deliver_s``)
    latencies of one engine family set as measured (a latency not measured keeps its value)."""
    values = {}
    for key, name, what in (("request_s", "inbound", "send to the scheduler's receipt, idle scheduler"),
                            ("deliver_s", "outbound", "results processed to the first token at the client")):
        if np.isfinite(lat[f"{name}_s"]):
            values[key] = (lat[f"{name}_s"], f"{source}: step log, {what} (median of {lat[f'{name}_n']})")
    return write_measured(hardware_yaml, out, family, values)
