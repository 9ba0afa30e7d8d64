"""Fit a GPU profile's efficiencies to ``gpu-probe`` step times (``servetwin calibrate fit DIR --base h100``),
and say how far the profile as committed and the fitted one sit from every probed shape.

A probe times bare forwards (calibrate/gpu_probe.py): no scheduler, no sampling loop, no CUDA graphs. So
the fit frees the hardware's coefficients — ``eta_compute``, ``eta_bandwidth``, ``kappa_kv``,
``kappa_attn`` — plus one fixed time per forward (kernel launches), and leaves every engine family's step
overheads as they are in the base profile: those are the engines' own host time, which a bare forward does
not have. The profile as committed is judged on its roofline part alone (no overheads) for the same reason.

Errors are absolute relative errors per shape (median and p90 by step kind: prefill, decode, mixed);
residuals (predicted / measured − 1, median) by decode batch, decode context, prefill chunk and cached
prefix say whether the model's form holds: a fit that is right on average but trends with one of them is
missing a term."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.fit import HARDWARE_PARAMS, FitResult, fit_steps, predict_time, write_profile
from calibrate.gates import guard
from foundation.errors import ServetwinError, SpecError
from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import HardwareProfile, ModelProfile, Overheads, load_hardware, load_model

FAMILY = "gpu-probe"        # a bare forward: the overheads of no engine
FREE = ("eta_compute", "eta_bandwidth", "kappa_kv", "kappa_attn", "step_eager_s")


def is_probe_dir(path: str | Path) -> bool:
    return (Path(path) / "gpu-probe.json").is_file()


def read_probes(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A probe directory's facts and its rows (probes.parquet, or probes.csv where it was written without pyarrow)."""
    import pandas as pd
    p = Path(path)
    try:
        meta = json.loads((p / "gpu-probe.json").read_text())
    except (OSError, ValueError) as err:
        raise SpecError(f"{p}: not a gpu-probe directory (gpu-probe.json: {err})") from err
    rows_file = p / str(meta.get("rows_file", "probes.parquet"))
    if not rows_file.is_file():
        raise SpecError(f"{p}: the probe's rows ({rows_file.name}) are missing")
    df = pd.read_parquet(rows_file) if rows_file.suffix == ".parquet" else pd.read_csv(rows_file)
    return meta, df.to_dict("records")


def shape(row: dict[str, Any]) -> BatchShape:
    """The step a probe row timed, as the cost model sees it (every prefill chunk ends its prompt)."""
    b = BatchShape()
    if int(row["q"]):
        b.add_prefill(int(row["q"]), int(row["c"]), True)
    for _ in range(int(row["b"])):
        b.add_decode(int(row["ctx"]))      # its cached context (the model adds the new token's own pair)
    return b


def bare(hw: HardwareProfile, fixed_s: float = 0.0) -> HardwareProfile:
    """The profile with one more family whose only overhead is a fixed time per forward."""
    ovh = Overheads(step_graph_s=fixed_s, step_eager_s=fixed_s, per_seq_s=0.0)
    return dataclasses.replace(hw, overheads={**hw.overheads, FAMILY: ovh})


def predict(hw: HardwareProfile, model: ModelProfile, shapes: Sequence[BatchShape]) -> np.ndarray:
    cm = CostModel(hw, model, FAMILY, 1, graph_max_bs=0)
    return np.array([predict_time(cm, b) for b in shapes])


def kind_errors(kinds: Sequence[str], rel: np.ndarray) -> dict[str, dict[str, float]]:
    """Median and p90 absolute relative error by step kind (and over all shapes)."""
    out = {}
    for k in [*sorted(set(kinds)), "all"]:
        e = np.abs(rel[[k in ("all", x) for x in kinds]])
        out[k] = {"n": int(e.size), "median_ape": round(float(np.median(e)), 4),
                  "p90_ape": round(float(np.quantile(e, 0.9)), 4)}
    return out


def residual_trends(rows: Sequence[dict[str, Any]], rel: np.ndarray) -> dict[str, dict[int, float]]:
    """Median signed residual by decode batch and context (decode shapes), by chunk and cached prefix (prefill)."""
    axes = {"decode_b": ("decode", "b"), "decode_ctx": ("decode", "ctx"), "prefill_q": ("prefill", "q"),
            "prefill_c": ("prefill", "c")}
    out: dict[str, dict[int, float]] = {}
    for name, (kind, col) in axes.items():
        groups: dict[int, list[float]] = {}
        for r, e in zip(rows, rel, strict=True):
            if r["kind"] == kind:
                groups.setdefault(int(r[col]), []).append(float(e))
        out[name] = {k: round(float(np.median(v)), 4) for k, v in sorted(groups.items())}
    return out


def fit_gpu_probes(paths: Sequence[str | Path], model: str | None, base: str, out: str | Path,
                   accept_poor_fit: bool = False) -> tuple[FitResult, dict[str, Any]]:
    """Fit, judge and write ``out`` (the base profile with fitted efficiencies); returns the fit and its report."""
    probes = [read_probes(p) for p in paths]
    names = {m["model"] for m, _ in probes}
    if len(names) != 1 or (model is not None and model not in names):
        raise SpecError(f"calibrate fit --model {model}: the probes timed {sorted(names)}; fit one model at a time")
    mp, hw = load_model(names.pop()), load_hardware(base)
    rows = [r for _, rs in probes for r in rs]
    shapes, y = [shape(r) for r in rows], np.array([float(r["step_s"]) for r in rows])
    if len(rows) < len(FREE):
        raise ServetwinError(f"only {len(rows)} probe shapes; need at least {len(FREE)}")
    res = fit_steps(bare(hw), mp, FAMILY, shapes, y.tolist(), free=FREE, graph_max_bs=0)
    kinds = [str(r["kind"]) for r in rows]
    committed = predict(bare(hw), mp, shapes) / y - 1
    fitted = np.asarray(res.residuals)
    report = {"committed": kind_errors(kinds, committed), "fitted": kind_errors(kinds, fitted),
              "trends_committed": residual_trends(rows, committed), "trends_fitted": residual_trends(rows, fitted)}
    quality: dict[str, Any] = {
        "method": "bounded relative least squares on gpu-probe forward times (engine overheads not fitted)",
        "r2": round(res.r2, 4), "mape": round(res.mape, 4), "observations": len(rows),
        "forward_fixed_s": round(res.params["step_eager_s"], 7),
        "devices": sorted({str(m["facts"].get("name")) for m, _ in probes}),
        "per_probe_error": [{"kind": k, "measured_s": round(float(t), 6), "error": round(float(e), 4)}
                            for k, t, e in zip(kinds, y, fitted, strict=True)],
        "errors": report, "probes": [str(p) for p in paths]}
    if res.at_bound:
        quality["at_bound"] = res.at_bound
    guard(quality, [], accept_poor_fit, f"the fit of {len(rows)} gpu-probe shapes",
          cause="the residual trends (printed with --accept-poor-fit) say which term the cost model misses")
    hw_params = {k: v for k, v in res.params.items() if k in HARDWARE_PARAMS}
    write_profile(hw.path, out, next(iter(hw.overheads)), hw_params,
                  f"fitted by servetwin calibrate fit on {len(rows)} gpu-probe shapes", quality)
    _name(Path(out))
    return res, report


def _name(path: Path) -> None:
    import yaml

    from calibrate.fit import dump_profile
    data = yaml.safe_load(path.read_text())
    data["name"] = path.stem
    data["description"] = f"{data.get('description', '')}, efficiencies fitted to gpu-probe forward times"
    dump_profile(path, data)


def report_lines(report: dict[str, Any]) -> list[str]:
    """The error table (median / p90 absolute error by step kind) and the residual trends, as text."""
    lines = [f"{'step kind':10s} {'n':>4s} {'committed med':>14s} {'p90':>7s} {'fitted med':>11s} {'p90':>7s}"]
    for k, c in report["committed"].items():
        f = report["fitted"][k]
        lines.append(f"{k:10s} {c['n']:4d} {c['median_ape']:14.1%} {c['p90_ape']:7.1%} {f['median_ape']:11.1%} "
                     f"{f['p90_ape']:7.1%}")
    for axis, by in report["trends_fitted"].items():
        if by:
            lines.append(f"fitted residual by {axis}: " + ", ".join(f"{k}: {v:+.1%}" for k, v in by.items()))
    return lines
