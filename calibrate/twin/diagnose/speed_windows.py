"""Did an engine instance change speed *within* a run? ``calibrate.twin.host_speed`` gives one median per run; a
40-s run can hold a slow stretch and a fast one. Here every decode-only forward of an instance is priced by its
calibration traces' forwards of the same batch size — the median of those with as many requests decoding (at
least ``MIN_SHAPE`` of them; other sizes by a line through those medians, seconds = a + b·requests) — and each
run's forwards are cut into windows of ``--width`` seconds from the run's start: the median of measured / priced
in each window (``x_fit``), with the number of forwards behind it. Pricing by batch size keeps a window of larger
batches from passing for a slower instance. A request's context is not priced: in the study's traces every
prompt is 2,048 tokens and outputs 32–128, so within one batch size it moves a forward little (and on these
traces it is nearly a multiple of the batch size, which a fit on both cannot tell apart). Windows with fewer
than ``MIN_FORWARDS`` forwards are left out.

    servetwin twin-study diagnose speed-windows OUT [--config sglang-lpm] [--width 10]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.tables import print_table
from calibrate.twin.host_speed import decode_steps, served
from calibrate.twin.live import CONFIGS, ORDER
from foundation.errors import ServetwinError

MIN_FORWARDS = 10      # forwards a window needs to be shown
MIN_FIT = 20           # calibration forwards the pricing needs
MIN_SHAPE = 5          # calibration forwards of one batch size for their median to price that size


def price_table(cal: pd.DataFrame) -> dict[int, float]:
    """Seconds per decode forward by requests decoding: the median of the calibration forwards of that size
    where there are ``MIN_SHAPE`` of them."""
    sizes = cal.groupby("requests")["s"].agg(["median", "size"])
    return {int(n): float(row["median"]) for n, row in sizes.iterrows() if row["size"] >= MIN_SHAPE}


def priced(steps: pd.DataFrame, prices: dict[int, float]) -> np.ndarray:
    """Each forward's price: its batch size's calibration median, or the line through those medians."""
    n = np.array(sorted(prices), float)
    med = np.array([prices[int(k)] for k in n])
    slope, icept = np.polyfit(n, med, 1) if len(n) > 1 else (0.0, float(med[0]))
    return np.array([prices.get(int(k), icept + slope * k) for k in steps["requests"].to_numpy()], float)


def instance_windows(out: Path, label: str, width: float) -> pd.DataFrame:
    steps = decode_steps(out, label)
    if steps is None:
        return pd.DataFrame()
    runs = served(out, label)
    t = steps["t_unix"].to_numpy()
    in_cal = np.zeros(len(steps), bool)
    for what, _, _, start, end in runs:
        if what == "calibration":
            in_cal |= (t >= start) & (t < end)
    prices = price_table(steps[in_cal])
    if in_cal.sum() < MIN_FIT or not prices:
        raise ServetwinError(f"{out}: {label}'s calibration traces hold {int(in_cal.sum())} decode forwards in its "
                             f"step log; pricing needs {MIN_FIT}, {MIN_SHAPE} of one batch size")
    ratio = steps["s"].to_numpy(float) / priced(steps, prices)
    rows = []
    for what, cell, seed, start, end in runs:
        for w in np.arange(start, end, width):
            sel = (t >= w) & (t < min(w + width, end))
            if sel.sum() >= MIN_FORWARDS:
                rows.append({"config": label, "what": what, "cell": cell, "seed": seed, "window_s": w - start,
                             "forwards": int(sel.sum()), "x_fit": float(np.median(ratio[sel]))})
    return pd.DataFrame(rows)


def table(out: Path, config: str | None = None, width: float = 10.0) -> pd.DataFrame:
    """One row per window of every run each instance served (or ``config``'s), instances in study order."""
    if config and config not in CONFIGS:
        raise ServetwinError(f"--config {config!r}: not a study configuration (one of {', '.join(CONFIGS)})")
    if not width > 0:
        raise ServetwinError(f"--width {width}: a window is a positive number of seconds")
    labels = [config] if config else [c for c in ORDER if (out / "calibration" / c).is_dir()]
    frames = [f for f in (instance_windows(out, c, width) for c in labels) if not f.empty]
    if not frames:
        raise ServetwinError(f"{out}: no step log and calibration traces of {', '.join(labels) or 'any instance'} "
                             "(SGLang writes a step log in every study; vLLM with --vllm-step-log)")
    return pd.concat(frames, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose speed-windows",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("out", help="a twin-study folder (OUT)")
    ap.add_argument("--config", help="one configuration (default: every instance with a step log)")
    ap.add_argument("--width", type=float, default=10.0, help="window length in seconds (default 10)")
    a = ap.parse_args(argv)
    return print_table(lambda: table(Path(a.out), a.config, a.width).round(3))
