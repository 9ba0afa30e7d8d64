"""The study's tables from RunRecords: absolute metrics per condition and configuration (with
keeps-pace), paired gaps with intervals and p-values, the decomposition (defaults vs matched, φ),
and dispersion. Runs are grouped by their labels (condition, arm, configuration) — or, for runs
without labels, by scenario name and engine — and a group must not mix configurations."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics import KEEPS_PACE, run_metrics
from analysis.records import RecordError, RunRecord
from analysis.stats import geomean, paired_gap, removed_fraction, removed_fraction_interval, spread_of_medians
from foundation.errors import ServetwinError

LATENCY = ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50")


def _labels(rec: RunRecord) -> dict[str, Any]:
    """The run's labels, with the scenario name, arm "runs" and the engine standing in for any missing (a live run's
    twin is labelled with its configuration only)."""
    base = {"condition": rec.meta["scenario"].get("name", "scenario"), "arm": "runs",
            "config": rec.meta["engine"], "config_index": 0 if "vllm" in rec.meta["engine"] else 1}
    return {**base, **(rec.meta.get("labels") or {})}


def _config_key(rec: RunRecord) -> str:
    sc = {k: v for k, v in rec.meta["scenario"].items() if k != "seed"}
    blob = json.dumps([rec.meta["engine_config"], rec.meta["hardware"], rec.meta["model"], sc], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


CLUSTER_COLUMNS = ("replicas", "router", "prefix_groups")


def condition_of(rec: RunRecord) -> dict[str, Any]:
    """The condition's parameters from the run's scenario: rate (DAG/s), σ, L, duration, hardware."""
    sc = rec.meta.get("scenario") or {}
    pr = sc.get("prompts") or {}
    f, d = pr.get("prefix_tokens"), pr.get("suffix_tokens")
    sigma = pr.get("sharing") if pr.get("sharing") is not None else (f / (f + d) if f is not None and d else None)
    length = pr.get("length") if pr.get("length") is not None else ((f or 0) + (d or 0) or None)
    cl = rec.meta.get("cluster") or {}
    return {"rate": (sc.get("arrivals") or {}).get("rate"), "sigma": sigma, "length": length,
            "duration": sc.get("duration_s"), "hw": rec.meta.get("hardware"),
            "replicas": int(cl.get("replicas", 1)), "router": cl.get("router", "none"),
            "prefix_groups": int(pr.get("prefix_groups", 1))}


def run_table(runs: list[RunRecord]) -> pd.DataFrame:
    rows = []
    seen: dict[tuple[str, str, str], str] = {}
    for rec in runs:
        lab = _labels(rec)
        key = (lab["condition"], lab["arm"], lab["config"])
        ck = _config_key(rec)
        if seen.setdefault(key, ck) != ck:
            raise RecordError(f"runs of {'/'.join(key)} differ in configuration or scenario; refusing to "
                              "pool them (give them different labels)")
        rows.append({**lab, "source": rec.meta.get("source", "sim"), **condition_of(rec), **run_metrics(rec)})
    return pd.DataFrame(rows)


def absolute_table(rt: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (cond, arm, cfg), g in rt.groupby(["condition", "arm", "config"], sort=False):
        row: dict[str, Any] = {"condition": cond, "arm": arm, "config": cfg, "engine": g["engine"].iloc[0],
                               "seeds": len(g)}
        for m in (*LATENCY, "throughput"):
            row[m] = geomean(g[m]) if (g[m] > 0).all() else float("nan")
        row["offered_load"] = float(g["offered_load"].mean())
        row["realised_load"] = float(g["realised_load"].mean())
        # the study's rule: the condition's geometric-mean X against 0.97 × the nominal offered load
        row["keeps_pace"] = "yes" if row["throughput"] >= KEEPS_PACE * row["offered_load"] else "no"
        row["seeds_keeping_pace_realised"] = f"{int(g['keeps_pace_realised'].sum())}/{len(g)}"
        row["kv_peak"] = float(g["kv_peak"].mean())
        row["preemptions"] = float(g["preemptions"].mean())
        top = g["preemptions"].max()                    # NaN where the engine counts none (SGLang 0.4.1 live)
        row["preemptions_max"] = int(top) if pd.notna(top) else float("nan")
        row["prefix_hit_fraction"] = float(g["prefix_hit_fraction"].mean())
        out.append(row)
    return pd.DataFrame(out)


def _pairs(rt: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame, pd.DataFrame]]:
    res = []
    for (cond, arm), g in rt.groupby(["condition", "arm"], sort=False):
        idx = sorted(g["config_index"].unique())
        if len(idx) < 2:
            continue
        a = g[g["config_index"] == idx[0]].set_index("seed")
        b = g[g["config_index"] == idx[1]].set_index("seed")
        common = sorted(set(a.index) & set(b.index))
        if common:
            res.append((cond, arm, a.loc[common], b.loc[common]))
    return res


def _oriented(a: pd.DataFrame, b: pd.DataFrame, m: str) -> tuple[pd.Series, pd.Series] | None:
    """The two sides of R per seed: (a, b) for latencies, (b, a) for throughput (None where a value is
    missing or not positive)."""
    x, y = (a[m], b[m]) if m != "throughput" else (b[m], a[m])
    if (x <= 0).any() or (y <= 0).any() or x.isna().any() or y.isna().any():
        return None
    return x, y


def _log_gaps(a: pd.DataFrame, b: pd.DataFrame, m: str) -> pd.Series | None:
    """ln R per seed (``_oriented``)."""
    xy = _oriented(a, b, m)
    return None if xy is None else np.log(xy[0].astype(float)) - np.log(xy[1].astype(float))


def gap_table(rt: pd.DataFrame) -> pd.DataFrame:
    """R = first configuration / second (latencies; > 1: the second is faster); throughput inverted."""
    rows = []
    for cond, arm, a, b in _pairs(rt):
        for m in (*LATENCY, "throughput"):
            xy = _oriented(a, b, m)
            if xy is None:
                continue
            gap = paired_gap(xy[0].to_numpy(), xy[1].to_numpy())
            rows.append({"condition": cond, "arm": arm, "pair": f"{a['config'].iloc[0]}/{b['config'].iloc[0]}",
                         "rate": a["rate"].iloc[0], "sigma": a["sigma"].iloc[0], "duration": a["duration"].iloc[0],
                         **{k: a[k].iloc[0] for k in CLUSTER_COLUMNS if k in a}, "metric": m, "gap": gap.ratio,
                         "ci_lo": gap.lo, "ci_hi": gap.hi, "p": gap.p_value,
                         "significant": gap.significant, "n": gap.n})
    return pd.DataFrame(rows)


def decomposition_table(gaps: pd.DataFrame, defaults: str = "defaults", matched: str = "matched",
                        rt: pd.DataFrame | None = None) -> pd.DataFrame:
    """φ per condition and metric; with the run table ``rt`` its 95 % interval over the seeds both arms ran
    (``phi_lo``, ``phi_hi``: ``analysis.stats.removed_fraction_interval``; unbounded where the defaults gap
    is not significant)."""
    rows: list[dict[str, Any]] = []
    if gaps.empty:
        return pd.DataFrame(rows)
    logs: dict[tuple[str, str, str], pd.Series | None] = {}
    for cond, arm, a, b in _pairs(rt) if rt is not None else []:
        logs.update({(cond, arm, m): _log_gaps(a, b, m) for m in (*LATENCY, "throughput")})
    for (cond, metric), g in gaps.groupby(["condition", "metric"], sort=False):
        d = g[g["arm"] == defaults]
        m = g[g["arm"] == matched]
        if d.empty or m.empty:
            continue
        r_def, r_mat = float(d["gap"].iloc[0]), float(m["gap"].iloc[0])
        phi = removed_fraction(r_def, r_mat)
        row = {"condition": cond, "metric": metric, "gap_defaults": r_def, "gap_matched": r_mat,
               "phi": phi if phi is not None else float("nan")}
        if rt is not None:
            row["phi_lo"], row["phi_hi"] = phi_interval(logs.get((cond, defaults, metric)),
                                                        logs.get((cond, matched, metric)))
        row["phi_note"] = "" if phi is not None else "|ln R_def| ≤ ln 1.1: not computed"
        rows.append(row)
    return pd.DataFrame(rows)


def phi_interval(d: pd.Series | None, m: pd.Series | None) -> tuple[float, float]:
    """φ's 95 % interval from the two arms' log gaps indexed by seed, over the seeds both have (NaN where an
    arm has none)."""
    if d is None or m is None:
        return float("nan"), float("nan")
    seeds = sorted(set(d.index) & set(m.index))
    return removed_fraction_interval(d.loc[seeds].to_numpy(), m.loc[seeds].to_numpy())


def dispersion_table(rt: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (cond, arm, cfg), g in rt.groupby(["condition", "arm", "config"], sort=False):
        rows.append({"condition": cond, "arm": arm, "config": cfg, "tail_ratio": float(np.mean(g["tail_ratio"])),
                     "ln_ttft_skew": float(np.mean(g["ln_ttft_skew"])),
                     "spread_ln_p50": spread_of_medians(g["ttft_p50"])})
    return pd.DataFrame(rows)


def workload_table(rt: pd.DataFrame) -> pd.DataFrame:
    """Workload realisation per condition: requests measured, nominal and realised offered load."""
    rows = []
    for cond, g in rt.groupby("condition", sort=True):
        rows.append({"condition": cond, "rate": g["rate"].iloc[0], "sigma": g["sigma"].iloc[0],
                     "length": g["length"].iloc[0], "duration": g["duration"].iloc[0], "runs": len(g),
                     "requests_per_run": float(g["n"].mean()), "offered_nominal": float(g["offered_load"].mean()),
                     "offered_realised": float(g["realised_load"].mean()),
                     "realised_cv_across_seeds": float(g.groupby("seed")["realised_load"].mean().std(ddof=1)
                                                       / g["realised_load"].mean()) if g["seed"].nunique() > 1
                     else float("nan")})
    return pd.DataFrame(rows)


def control_arm_table(rt: pd.DataFrame, defaults: str = "defaults", matched: str = "matched") -> pd.DataFrame:
    """Control-arm stability: the second configuration (unchanged between arms) matched over defaults."""
    rows = []
    for cond, g in rt.groupby("condition", sort=True):
        d = g[(g["arm"] == defaults) & (g["config_index"] == 1)].set_index("seed")
        m = g[(g["arm"] == matched) & (g["config_index"] == 1)].set_index("seed")
        seeds = sorted(set(d.index) & set(m.index))
        if not seeds:
            continue
        row: dict[str, Any] = {"condition": cond, "config": d["config"].iloc[0], "seeds": len(seeds)}
        for metric in ("ttft_p50", "ttft_p95", "tpot_p50", "throughput"):
            row[f"{metric}_ratio"] = geomean(m.loc[seeds, metric] / d.loc[seeds, metric])
        rows.append(row)
    return pd.DataFrame(rows)


def all_tables(runs: list[RunRecord]) -> dict[str, pd.DataFrame]:
    rt = run_table(runs)
    gaps = gap_table(rt)
    from analysis.turns import turn_table
    return {"runs": rt, "absolute": absolute_table(rt), "gaps": gaps, "decomposition": decomposition_table(gaps, rt=rt),
            "dispersion": dispersion_table(rt), "workload": workload_table(rt), "control_arm": control_arm_table(rt),
            "turns": turn_table(runs)}


def to_markdown(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    if df.empty:
        return "(none)\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if isinstance(v, float | np.floating):
                cells.append("—" if np.isnan(v) else format(float(v), floatfmt))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def print_table(make: Callable[[], pd.DataFrame]) -> int:
    """A diagnostic command's body: print the table ``make`` builds, or its one clear error (exit code 2)."""
    try:
        print(to_markdown(make()))
    except ServetwinError as err:
        print(f"error: {err}")
        return 2
    return 0
