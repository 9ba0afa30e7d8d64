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

    servetwin twin-study diagnose vllm-admission RUN --steps STEP_LOG [RUN --steps STEP_LOG ...] [--profile PROFILE]
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from analysis.records import RunRecord, read_run
from analysis.tables import to_markdown
from calibrate.streams import split_ttft, twin_split
from foundation.errors import ServetwinError
from live.vllm_steplog import read_steps

STREAM_BINS = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 5), (6, 1 << 30)]
QUEUE_BINS = [(0, 0), (1, 1), (2, 1 << 30)]


def with_twin(run: RunRecord, steps: pd.DataFrame, profile: str | None, model: str) -> pd.DataFrame:
    """``split_ttft``, with the twin's split of the same requests beside it (``twin_*`` columns) when a
    profile is given."""
    live = split_ttft(run, steps)
    if profile is None:
        return live
    tw = twin_split(run, profile, model).set_index("request_id").add_prefix("twin_")
    return live.join(tw, on="request_id", how="inner")


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
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose vllm-admission",
                                 description=__doc__.splitlines()[0])
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
