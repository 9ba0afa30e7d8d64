"""Where a vLLM request's time to first token goes, read from the engine's own step log
(``live.vllm_steplog``) beside the live run's client timestamps (both Unix times on one host).

Each request's first token is matched to the logged forward that prefilled it — the latest iteration
with a prefilled ("context") request logged at or before the token reached the client, at most
``MATCH_S`` (100 ms) before it, begun after the request was sent, each forward matched to at most as
many requests as it prefilled — and its TTFT split in three: **admission**, send → that forward's start (the
front end, the engine core's input path, the forward under way and requests queued ahead; the time
between the forward's end and its log line is in it too, about a millisecond); **prefill**, that
forward's elapsed time as vLLM measured it (with chunked prefill, the chunk that finished the prompt);
**output**, the log line → the token at the client. Binned by the streams in flight when it was sent
(requests between their first and last token) and by the requests queued ahead of it (sent before it,
no first token yet), the medians say which part grows with load: a twin that prices the forward right
but misses the admission misses the front end, not the step.

With ``--profile`` the twin's own split of the same requests stands beside it (``twin_*``: the simulator's
step log of the identical trace — its admission is the profile's ``request_s`` plus the wait for the step
under way, its output the profile's output latency, none for vLLM unless measured).

    python -m calibrate.vllm_admission RUN --steps STEP_LOG [RUN --steps STEP_LOG ...] [--profile PROFILE]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import pandas as pd

from analysis.records import RunRecord, read_run
from analysis.tables import to_markdown
from calibrate.compare import twin
from calibrate.ttft_residuals import in_flight
from foundation.errors import ServetwinError
from live.vllm_steplog import read_steps
from simulator.profiles import HardwareProfile

MATCH_S = 0.100          # a first token reaches the client at most this long after its step's log line
# (1-3 ms on an idle host; under load the API server may stream it tens of ms after logging the step)
SLACK_S = 0.001          # a log line stamped this much after the token still counts (clocks, rounding)
STREAM_BINS = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 5), (6, 1 << 30)]
QUEUE_BINS = [(0, 0), (1, 1), (2, 1 << 30)]


def split_ttft(run: RunRecord, steps: pd.DataFrame, match_s: float = MATCH_S) -> pd.DataFrame:
    """One row per answered request matched to its prefill forward: streams in flight and requests queued
    ahead at its send, its TTFT and the three parts (s), the forward's prefilled and decoding requests."""
    t0 = run.meta.get("run_window", {}).get("start_unix")
    if t0 is None:
        raise ServetwinError(f"{run.path}: run.json has no run_window.start_unix to align the step log with")
    req = run.requests.dropna(subset=["first_token_s"]).sort_values("send_s")
    send, first = req["send_s"].to_numpy(float), req["first_token_s"].to_numpy(float)
    last = req["last_token_s"].fillna(np.inf).to_numpy(float)
    pre = steps[steps["ctx_requests"] > 0]
    t = pre["t_unix"].to_numpy(float) - t0
    elapsed = pre["elapsed_s"].to_numpy(float)
    j = match_forwards(send, first, t, t - elapsed, pre["ctx_requests"].to_numpy(int), match_s)
    ok = j >= 0
    if not ok.any():
        raise ServetwinError(f"{run.path}: no first token within {match_s * 1000:g} ms of a logged prefill; "
                             "is the step log from the instance that served this run?")
    j = j[ok]
    return pd.DataFrame({"request_id": req["request_id"].to_numpy()[ok],
                         "streams": in_flight(send, first, last)[ok],
                         "queued_ahead": in_flight(send, send, first)[ok],
                         "ttft_s": (first - send)[ok], "admission_s": (t[j] - elapsed[j]) - send[ok],
                         "prefill_s": elapsed[j], "output_s": first[ok] - t[j],
                         "prefill_requests": pre["ctx_requests"].to_numpy()[j],
                         "decoding": pre["gen_requests"].to_numpy()[j]})


def match_forwards(send: np.ndarray, first: np.ndarray, end: np.ndarray, start: np.ndarray, room: np.ndarray,
                   match_s: float) -> np.ndarray:
    """For each request, the index of the logged prefill that produced its first token (-1: none): in order
    of first tokens, the latest one logged at most ``match_s`` before the token, begun after the request was
    sent, with room left (a forward prefills as many requests as it logged)."""
    room = room.copy()
    got = np.full(len(send), -1)
    for i in np.argsort(first, kind="stable"):
        k = int(np.searchsorted(end, first[i] + SLACK_S, side="right")) - 1
        while k >= 0 and first[i] - end[k] <= match_s and start[k] >= send[i] - SLACK_S:
            if room[k] > 0:
                room[k] -= 1
                got[i] = k
                break
            k -= 1
    return got


def with_twin(run: RunRecord, steps: pd.DataFrame, profile: str | None, model: str) -> pd.DataFrame:
    """``split_ttft``, with the twin's split of the same requests beside it (``twin_*`` columns) when a
    profile is given."""
    live = split_ttft(run, steps)
    if profile is None:
        return live
    tw = twin_split(run, profile, model).set_index("request_id").add_prefix("twin_")
    return live.join(tw, on="request_id", how="inner")


def twin_split(run: RunRecord, profile: str | HardwareProfile, model: str = "tiny-llama",
               log: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """The same split for the run's simulated twin, from the simulator's own step log (kept in ``log`` if
    given): per request, the twin's admission (send → the start of the step that finished its prompt), that
    step, the output path (the step's end → its first token at the client: the profile's output latency),
    its send in the twin (a dependant's follows its predecessors' twins) and the number of steps its prompt
    was prefilled in (``chunks``)."""
    log = [] if log is None else log
    sim = twin(run, profile, model, step_log=log)
    last: dict[int, tuple[float, float]] = {}
    chunks: dict[int, int] = {}
    for e in log:
        for r in e.get("reqs", []):
            if e.get("ev") == "run" and len(r) == 3:
                last[int(r[0])] = (float(e["t0"]), float(e["t1"]))      # the chunk that ends its prompt
                chunks[int(r[0])] = chunks.get(int(r[0]), 0) + 1
    req = sim.requests.dropna(subset=["first_token_s"])
    req = req[req["request_id"].astype(int).isin(list(last))]
    ids = req["request_id"].astype(int).to_numpy()
    t0 = np.array([last[i][0] for i in ids])
    t1 = np.array([last[i][1] for i in ids])
    send, first = req["send_s"].to_numpy(float), req["first_token_s"].to_numpy(float)
    return pd.DataFrame({"request_id": req["request_id"].to_numpy(), "send_s": send, "ttft_s": first - send,
                         "admission_s": t0 - send, "prefill_s": t1 - t0, "output_s": first - t1,
                         "chunks": [chunks[i] for i in ids]})


def binned(rows: pd.DataFrame, column: str, bins: list[tuple[int, int]]) -> pd.DataFrame:
    """Median TTFT and parts (ms) and request counts per bin of ``column``."""
    out = []
    for lo, hi in bins:
        g = rows[(rows[column] >= lo) & (rows[column] <= hi)]
        if g.empty:
            continue
        label = str(lo) if lo == hi else (f"{lo}+" if hi >= 1 << 30 else f"{lo}–{hi}")
        parts = ("ttft", "admission", "prefill", "output")
        medians = {f"{p}_ms": float(g[f"{p}_s"].median() * 1000) for p in parts}
        medians |= {f"twin_{p}_ms": float(g[f"twin_{p}_s"].median() * 1000) for p in parts if f"twin_{p}_s" in g}
        out.append({column: label, "requests": len(g), **medians})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="live run folders")
    ap.add_argument("--steps", action="append", required=True,
                    help="the step log of the instance that served each run (once per run, in order)")
    ap.add_argument("--profile", help="a fitted hardware profile: add the twin's own split of the same requests")
    ap.add_argument("--model", default="tiny-llama")
    a = ap.parse_args(argv)
    if len(a.steps) != len(a.runs):
        ap.error(f"{len(a.runs)} run(s) and {len(a.steps)} --steps: give each run the step log of its instance")
    try:
        rows = pd.concat([with_twin(read_run(r), read_steps(s), a.profile, a.model)
                          for r, s in zip(a.runs, a.steps, strict=True)], ignore_index=True)
    except ServetwinError as err:
        print(f"vllm admission: error: {err}", file=sys.stderr)
        return err.exit_code
    print(f"{len(rows)} requests matched to their prefill forward\n")
    print("## By streams in flight at send\n")
    print(to_markdown(binned(rows, "streams", STREAM_BINS)))
    print("\n## By requests queued ahead at send\n")
    print(to_markdown(binned(rows, "queued_ahead", QUEUE_BINS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
