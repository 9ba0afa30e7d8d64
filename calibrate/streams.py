"""What a live run's records say of its requests' streams, for the calibrations that read them: the gaps
between a request's tokens and the streams in flight across each (``token_gaps``; ``calibrate.decode_load``),
the requests in flight when each was sent (``in_flight``, ``in_flight_at_send``; ``calibrate.lone_prefill``),
and a vLLM request's time to first token split by its engine's step log into admission, prefill and output,
live and in its twin (``split_ttft``, ``twin_split``; ``calibrate.vllm_front_end``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.records import RunRecord
from calibrate.compare import twin
from foundation.errors import ServetwinError
from simulator.profiles import HardwareProfile

SAME_STEP_S = 0.002       # tokens of one step, as far apart as a client may see them
MATCH_S = 0.100          # a first token reaches the client at most this long after its step's log line
# (1-3 ms on an idle host; under load the API server may stream it tens of ms after logging the step)
SLACK_S = 0.001          # a log line stamped this much after the token still counts (clocks, rounding)


def token_gaps(rec: RunRecord) -> pd.DataFrame:
    """One row per gap between consecutive token chunks of a request: its length, the number of
    requests streaming (between first and last token) at its midpoint, and how many other requests'
    first tokens fall inside it (a prefill finished during the gap)."""
    if rec.chunks is None:
        raise ServetwinError(f"{rec.path}: no per-token times (simulate with record_tokens=True)")
    req = rec.requests.dropna(subset=["first_token_s", "last_token_s"])
    first, last = np.sort(req["first_token_s"].to_numpy()), np.sort(req["last_token_s"].to_numpy())
    ch = rec.chunks.sort_values(["request_id", "t_s"])
    t = ch["t_s"].to_numpy()
    same = ch["request_id"].to_numpy()[1:] == ch["request_id"].to_numpy()[:-1]
    gap, mid = np.diff(t)[same], ((t[1:] + t[:-1]) / 2)[same]
    streaming = np.searchsorted(first, mid, side="right") - np.searchsorted(last, mid, side="left")
    # a first token emitted by the step that ends the gap (a mixed step) counts; one that arrives with
    # the gap's opening token does not (two streams of one step reach the client up to ~1 ms apart)
    a, b = t[:-1][same] + SAME_STEP_S, t[1:][same] + SAME_STEP_S
    prefills = np.searchsorted(first, b, side="right") - np.searchsorted(first, a, side="right")
    return pd.DataFrame({"streaming": streaming, "gap_s": gap, "prefills_inside": prefills})


def in_flight(send: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each send time, how many requests were inside [start, end) of their own (a request's own
    interval never contains its send)."""
    return np.array([int(((start < t) & (end > t)).sum()) for t in send])


def in_flight_at_send(req: pd.DataFrame) -> np.ndarray:
    """For each request, how many other requests were sent before it and had not finished."""
    send, end = req["send_s"].to_numpy(float), req["last_token_s"].to_numpy(float)
    return in_flight(send, send, np.where(np.isnan(end), np.inf, end))


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
