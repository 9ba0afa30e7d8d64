"""Did an engine instance run as fast through a twin study as when it was calibrated? The engines' own step
logs time every forward, so the question needs no model: for each instance, its small decode-only forwards
(1–3 requests decoding, nothing prefilling: on the tiny model their time is mostly the step's fixed cost,
so the traffic's sequence lengths move it little) in each run it served — warm-up, calibration traces,
study runs, in the order served — their median, and that median against the one its calibration traces
measured (``x_calibration``).

The study prices each instance's runs by its calibration traces (held out); where ``x_calibration`` moves
by more than the run-to-run spread, the twin's error there is the instance's (or the host's) change of
speed, not the model's. SGLang's forwards come from its step log (``OUT/logs/<config>.steps.<pid>``), vLLM's
from its iteration log (``--vllm-step-log``: ``OUT/logs/<config>.steps``); an instance without one is left out.

    servetwin twin-study diagnose host-speed OUT [--config vllm-c512] [--summary]

The twin report carries the summary (one row per instance) as "Each instance's speed through the study".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.tables import print_table, to_markdown
from calibrate.twin.live import CONFIGS, ORDER, calibration_dirs, start_unix
from calibrate.twin.steplog import has_step_log, step_log, vllm_step_log
from foundation.errors import ServetwinError
from live.sglang_steplog import read_events
from live.vllm_steplog import read_steps

MAX_BATCH = 3          # decode forwards of 1..MAX_BATCH requests are counted
MOVED = 1.25           # a run whose median forward is this much faster or slower than its calibration's


def decode_steps(out: Path, label: str) -> pd.DataFrame | None:
    """The instance's decode-only forwards: start (Unix s), duration (s) and requests decoding; None without
    a step log."""
    if has_step_log(out, label):
        runs = [e for e in read_events(step_log(out, label)) if e.get("ev") == "run" and e.get("mode") == "DECODE"]
        return pd.DataFrame({"t_unix": [e["t0"] for e in runs], "s": [e["t1"] - e["t0"] for e in runs],
                             "requests": [len(e["reqs"]) for e in runs]})
    path = vllm_step_log(out, label)
    if path is None:
        return None
    st = read_steps(path)
    st = st[(st["ctx_requests"] == 0) & (st["gen_requests"] > 0)]
    return pd.DataFrame({"t_unix": st["t_unix"].to_numpy(), "s": st["elapsed_s"].to_numpy(),
                         "requests": st["gen_requests"].to_numpy()})


def decode_forwards(out: Path, label: str) -> pd.DataFrame | None:
    """The instance's small decode-only forwards (1..MAX_BATCH requests): start (Unix s) and duration (s);
    None without a step log."""
    steps = decode_steps(out, label)
    if steps is None:
        return None
    small = steps[steps["requests"].between(1, MAX_BATCH)]
    return small[["t_unix", "s"]].reset_index(drop=True)


def has_decode_log(out: Path, label: str) -> bool:
    return has_step_log(out, label) or vllm_step_log(out, label) is not None


def served(out: Path, label: str) -> list[tuple[str, str, str, float, float]]:
    """(what, cell, seed, start_unix, end_unix) of every run the instance served, in the order served
    (study runs kept as failed attempts, ``seed-N.failed-K``, left out)."""
    dirs = [("warm-up", d) for d in (out / "warm-up" / label).glob("*/seed-*")]
    dirs += [("calibration", d) for d in calibration_dirs(out, label)]
    dirs += [("run", d) for d in (out / "live").glob(f"*/{label}/seed-*")]
    rows = []
    for what, d in dirs:
        if not d.name.removeprefix("seed-").isdigit() or not (d / "run.json").is_file():
            continue
        meta = json.loads((d / "run.json").read_text())
        start = start_unix(meta, d)
        cell = d.parents[1].name if what == "run" else d.parent.name
        rows.append((what, "—" if cell == label else cell, d.name, start, start + float(meta["run_window"]["end_s"])))
    return sorted(rows, key=lambda r: r[3])


def instance_table(out: Path, label: str, t0: float) -> pd.DataFrame:
    fw = decode_forwards(out, label)
    if fw is None:
        return pd.DataFrame()
    t, dur = fw["t_unix"].to_numpy(), fw["s"].to_numpy()
    rows, cal = [], []
    for what, cell, seed, start, end in served(out, label):
        s = dur[(t >= start) & (t < end)]
        if what == "calibration":
            cal.append(s)
        rows.append({"config": label, "what": what, "cell": cell, "seed": seed,
                     "start_min": (start - t0) / 60.0, "forwards": len(s),
                     "median_ms": float(np.median(s)) * 1e3 if len(s) else float("nan")})
    df = pd.DataFrame(rows)
    pooled = np.concatenate(cal) if cal else np.array([])
    df["x_calibration"] = df["median_ms"] / (float(np.median(pooled)) * 1e3) if len(pooled) else float("nan")
    return df


def table(out: Path, config: str | None = None) -> pd.DataFrame:
    """One row per run each instance served (or ``config``'s), instances in the order the study started them."""
    if config and config not in CONFIGS:
        raise ServetwinError(f"--config {config!r}: not a study configuration (one of {', '.join(CONFIGS)})")
    labels = [config] if config else [c for c in ORDER if (out / "calibration" / c).is_dir()]
    starts = [r[3] for c in labels for r in served(out, c)]
    if not starts:
        raise ServetwinError(f"{out}: no recorded runs of {', '.join(labels)} (is it a twin-study folder?)")
    frames = [f for f in (instance_table(out, c, min(starts)) for c in labels) if not f.empty]
    if not frames:
        raise ServetwinError(f"{out}: no step log of {', '.join(labels)} under {out / 'logs'} "
                             "(SGLang writes one in every study; vLLM with --vllm-step-log)")
    return pd.concat(frames, ignore_index=True)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per instance: its calibration traces' median forward, its warm-up's and study runs' medians
    against it (median; runs: range too), and how many runs moved beyond ``MOVED`` either way (the first of
    them named)."""
    rows = []
    for label, g in df.groupby("config", sort=False):
        runs, warm = g[g["what"] == "run"], g[g["what"] == "warm-up"]
        cal = g[g["what"] == "calibration"]
        x = runs["x_calibration"].to_numpy()
        moved = runs[np.abs(np.log(runs["x_calibration"])) > np.log(MOVED)]
        first = "" if moved.empty else f"; first {moved.iloc[0]['cell']}/{moved.iloc[0]['seed']} " \
                                      f"(×{moved.iloc[0]['x_calibration']:.2f})"
        rows.append({"config": label, "calibration_ms": float(np.median(cal["median_ms"])) if len(cal) else np.nan,
                     "warm_up_x": float(np.median(warm["x_calibration"])) if len(warm) else np.nan,
                     "runs_x": f"{x.min():.2f}–{x.max():.2f} ({np.median(x):.2f})" if len(x) else "—",
                     "runs_moved": f"{len(moved)} of {len(runs)}{first}"})
    return pd.DataFrame(rows)


def report_part(out: Path) -> list[str]:
    """The twin report's section (nothing for a study without step logs)."""
    if not any(has_decode_log(out, c) for c in ORDER):
        return []
    df = table(out)
    return [f"## Each instance's speed through the study (median of its decode-only forwards of 1–{MAX_BATCH} "
            "requests, from the engines' step logs, per run against its calibration traces; moved: beyond "
            f"×{MOVED:g} or ÷{MOVED:g}; every run: `servetwin twin-study diagnose host-speed OUT`)\n",
            to_markdown(summary(df).round(3)), ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose host-speed",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("out", help="a twin-study folder (OUT)")
    ap.add_argument("--config", help="one configuration (default: every instance with a step log)")
    ap.add_argument("--summary", action="store_true", help="one row per instance (the twin report's table)")
    a = ap.parse_args(argv)
    if a.summary:
        return print_table(lambda: summary(table(Path(a.out), a.config)).round(3))
    return print_table(lambda: table(Path(a.out), a.config).round(3))
