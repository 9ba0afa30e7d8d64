"""A vLLM instance's front-end loop, measured (simulator.front_end): how far apart one step's streams reach
the client (``stream_chunk_s``) and how long the API server's loop spends on each step's outputs
(``front_end_step_s``), from its calibration traces and its step log.

vLLM's step log splits each request's TTFT (``calibrate.streams.split_ttft``) into admission, its prefill
forward and the output path (the step's log line, written when the loop has processed the step, to the
token at the client).

**Spacing.** The output path grows with the streams ahead of the request in its step's outputs, one stream
after another: its median by that position (after the step's decodes, among its prefills) is fitted as a
line, whose slope is ``stream_chunk_s``.

**Loop time per step.** The admission runs from a request's send to the start of the forward that
prefilled it. A request sent to an idle engine reaches the engine core after the front end's latency (the
median admission of such requests) and its forward starts then; a request sent while others stream or
wait should join the first forward that starts after that same latency — the twin's rule — and any time
beyond it was lost in the front end (forwards it missed): the loop was busy with others' outputs or
taking in the requests ahead. That loss is measured on the instance's own forwards, so the forward times
themselves (which the twin may price differently) do not enter it, and the same statistic on the twin's
own step log is matched to it: the twin of each calibration trace is simulated with candidate times per
step (and the spacing), and the one whose mean loss over the busy requests (all but those sent to an idle
engine) is closest to the instance's is kept. Requests whose prompt the twin prefilled in more than one
forward are left out on both sides (their last chunk is not the first forward they could join).

    python -m calibrate.vllm_front_end RUN [RUN …] --steps STEP_LOG --profile PROFILE
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from analysis.records import RunRecord, read_run
from calibrate.decode_load import overhead_family
from calibrate.fit import with_params
from calibrate.streams import SLACK_S, split_ttft, twin_split
from foundation.errors import ServetwinError
from live.vllm_steplog import read_steps
from simulator.profiles import HardwareProfile, load_hardware

GRID_S = tuple(round(0.0001 * k, 6) for k in range(0, 41))     # 0 to 4 ms per step, 0.1 ms apart
MIN_REQUESTS = 10        # fewer idle or busy requests than this over the traces: nothing measured


class FrontEndFit(NamedTuple):
    step_s: float        # the loop's time per step whose twin loses what the instance lost
    chunk_s: float       # the spacing of one step's streams at the client
    live_lost_s: float   # the instance's mean time lost to missed forwards per busy request
    twin_lost_s: float   # the twin's, with step_s and chunk_s
    idle: int            # requests sent to an idle engine, over the traces
    busy: int            # the others


def chunk_spacing(rows: pd.DataFrame) -> float:
    """The output path's growth per stream ahead (s, >= 0): a line through its median by the request's mean
    position in its step's outputs — after the step's decodes, among its prefills (vLLM V1 schedules the
    running requests first, and streams a step's outputs in that order) — weighted by the requests at each."""
    position = (rows["decoding"] + (rows["prefill_requests"] + 1) / 2).clip(upper=16)
    by = rows.groupby(position)["output_s"].agg(["size", "median"])
    if len(by) < 2:
        return 0.0
    slope = np.polyfit(by.index.to_numpy(float), by["median"].to_numpy(float), 1,
                       w=np.sqrt(by["size"].to_numpy(float)))[0]
    return max(0.0, float(slope))


def lost(send: np.ndarray, join: np.ndarray, starts: np.ndarray, front_s: float) -> np.ndarray:
    """Per request, how much later its forward began than the first forward that began once it could have
    reached the engine core (``front_s`` after its send): the forwards it missed, in seconds (>= 0)."""
    starts = np.sort(starts)
    k = np.searchsorted(starts, send + front_s - SLACK_S)
    first = np.where(k < len(starts), starts[np.minimum(k, len(starts) - 1)], np.inf)
    return np.clip(join - first, 0.0, None)


def side_loss(rows: pd.DataFrame, starts: dict[int, np.ndarray]) -> pd.Series:
    """Time lost per request (``rows``: run, send_s, admission_s, idle) against each run's forward starts,
    the front end's latency taken as the median admission of that run's idle requests."""
    out = pd.Series(np.nan, index=rows.index)
    for k, g in rows.groupby("run"):
        front = float(g.loc[g["idle"], "admission_s"].median())
        send = g["send_s"].to_numpy(float)
        out[g.index] = lost(send, send + g["admission_s"].to_numpy(float), starts[int(k)], front)
    return out


def live_rows(runs: list[tuple[RunRecord, pd.DataFrame]]) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """The instance's matched requests of every run (with ``run`` and ``send_s``) and each run's forward
    starts on the run's clock."""
    parts, starts = [], {}
    for k, (run, steps) in enumerate(runs):
        rows = split_ttft(run, steps)
        sends = run.requests.set_index("request_id")["send_s"]
        parts.append(rows.assign(run=k, send_s=rows["request_id"].map(sends).to_numpy(float)))
        t0 = float(run.meta["run_window"]["start_unix"])
        starts[k] = (steps["t_unix"] - steps["elapsed_s"] - t0).to_numpy(float)
    rows = pd.concat(parts, ignore_index=True)
    return rows.assign(idle=(rows["streams"] == 0) & (rows["queued_ahead"] == 0)), starts


def twin_rows(runs: list[tuple[RunRecord, pd.DataFrame]], hw: HardwareProfile,
              model: str) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """The twin's admission of every request (run, request_id, its send in the twin, admission_s, chunks) and
    each twin run's step starts."""
    parts, starts = [], {}
    for k, (run, _) in enumerate(runs):
        log: list[dict[str, Any]] = []
        parts.append(twin_split(run, hw, model, log).assign(run=k))
        starts[k] = np.array([e["t0"] for e in log if e.get("ev") == "run"], float)
    return pd.concat(parts, ignore_index=True), starts


def fit_loop(runs: list[tuple[RunRecord, pd.DataFrame]], profile: str, model: str = "tiny-llama",
                grid: tuple[float, ...] = GRID_S) -> FrontEndFit | None:
    """The front end's loop for these live runs of one instance, each with its step log: the spacing of a
    step's streams, then the loop's time per step; None where too few requests were matched either idle
    or busy."""
    live, live_starts = live_rows(runs)
    hw = load_hardware(profile)
    family = overhead_family(runs[0][0])
    chunk_s = round(chunk_spacing(live), 6)
    best: FrontEndFit | None = None
    for step_s in grid:
        tw, tw_starts = twin_rows(runs, with_params(hw, family, {"front_end_step_s": step_s,
                                                                        "stream_chunk_s": chunk_s}), model)
        both = live.merge(tw[["run", "request_id", "send_s", "admission_s", "chunks"]], on=["run", "request_id"],
                          suffixes=("", "_twin"))
        both = both[both["chunks"] == 1]
        busy = ~both["idle"]
        if busy.sum() < MIN_REQUESTS or both["idle"].sum() < MIN_REQUESTS:
            return None
        mine = side_loss(both, live_starts)
        theirs = side_loss(both.assign(send_s=both["send_s_twin"], admission_s=both["admission_s_twin"]), tw_starts)
        fit = FrontEndFit(step_s, chunk_s, float(mine[busy].mean()), float(theirs[busy].mean()),
                          int(both["idle"].sum()), int(busy.sum()))
        if best is None or abs(fit.twin_lost_s - fit.live_lost_s) < abs(best.twin_lost_s - best.live_lost_s):
            best = fit
        if fit.twin_lost_s > fit.live_lost_s:
            break                      # the twin's loss grows with the loop's time per step
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="live run folders of one vLLM instance")
    ap.add_argument("--steps", required=True, help="that instance's step log (VllmCpu(step_log=…))")
    ap.add_argument("--profile", required=True, help="the instance's fitted hardware profile")
    ap.add_argument("--model", default="tiny-llama")
    a = ap.parse_args(argv)
    try:
        steps = read_steps(a.steps)
        fit = fit_loop([(read_run(r), steps) for r in a.runs], a.profile, a.model)
    except ServetwinError as err:
        print(f"vllm front end: error: {err}", file=sys.stderr)
        return err.exit_code
    if fit is None:
        print(f"vllm front end: fewer than {MIN_REQUESTS} idle or busy requests matched; nothing measured")
        return 1
    print(f"front_end_step_s {fit.step_s * 1000:.2f} ms, stream_chunk_s {fit.chunk_s * 1000:.2f} ms: time lost "
          "to missed forwards per busy request "
          f"{fit.live_lost_s * 1000:.2f} ms live, {fit.twin_lost_s * 1000:.2f} ms twin "
          f"({fit.idle} idle, {fit.busy} busy requests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
