"""Did an engine instance change speed *within* a run? ``calibrate.host_speed`` gives one median per run; a
40-s run can hold a slow stretch and a fast one. Here every decode-only forward of an instance is priced by a
line fitted on its calibration traces' decode forwards — seconds = a + b·requests + c·context tokens
(SGLang's step log gives the context; vLLM's iteration log does not, so c = 0 there) — and each run's
forwards are cut into windows of ``--width`` seconds from the run's start: the median of measured / fitted in
each window (``x_fit``), with the number of forwards behind it. Pricing by the fit keeps a window's batch
shapes from passing for a change of speed (a window of 3-request forwards is not slower than one of 1-request
forwards because it has more requests). Windows with fewer than ``MIN_FORWARDS`` forwards are left out.

    python -m calibrate.speed_windows OUT [--config sglang-lpm] [--width 10]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.tables import print_table
from calibrate.host_speed import decode_steps, served
from calibrate.twin_live import CONFIGS, ORDER
from scenarios.errors import ServetwinError

MIN_FORWARDS = 10      # forwards a window needs to be shown
MIN_FIT = 20           # calibration forwards the line needs


def fit_line(steps: pd.DataFrame) -> np.ndarray:
    """(a, b, c) of seconds = a + b·requests + c·context, least squares over ``steps``."""
    x = np.column_stack([np.ones(len(steps)), steps["requests"], steps["context"]]).astype(float)
    coef, *_ = np.linalg.lstsq(x, steps["s"].to_numpy(float), rcond=None)
    return coef


def priced(steps: pd.DataFrame, coef: np.ndarray) -> np.ndarray:
    return coef[0] + coef[1] * steps["requests"].to_numpy(float) + coef[2] * steps["context"].to_numpy(float)


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
    if in_cal.sum() < MIN_FIT:
        raise ServetwinError(f"{out}: {label}'s calibration traces hold {int(in_cal.sum())} decode forwards in its "
                             f"step log; the line needs {MIN_FIT}")
    ratio = steps["s"].to_numpy(float) / priced(steps, fit_line(steps[in_cal]))
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="a twin-study folder (OUT)")
    ap.add_argument("--config", help="one configuration (default: every instance with a step log)")
    ap.add_argument("--width", type=float, default=10.0, help="window length in seconds (default 10)")
    a = ap.parse_args(argv)
    return print_table(lambda: table(Path(a.out), a.config, a.width).round(3))


if __name__ == "__main__":
    raise SystemExit(main())
