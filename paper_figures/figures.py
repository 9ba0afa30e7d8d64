"""The reference study's headline figures from any RunRecords (simulated, live, or both: simulated
runs are drawn filled, live runs hollow). A figure whose inputs are missing says which runs it needs."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.metrics import measured
from analysis.records import RunRecord
from analysis.tables import all_tables
from paper_figures import study_figures as sf
from paper_figures.style import MARKERS, MissingRuns, color, new, save


def _rate(cond: str) -> float | None:
    m = re.search(r"rate[-=]?([0-9.]+)", cond)
    return float(m.group(1)) if m else None


def decomposition(tables: dict[str, pd.DataFrame], out: Path) -> Path:
    g = tables["gaps"]
    if not g.empty:
        g = g[g["metric"].isin(["ttft_p50", "ttft_p95"])]
    if g.empty or not {"defaults", "matched"} <= set(g["arm"]):
        raise MissingRuns("decomposition needs paired runs of two configurations in both arms 'defaults' and "
                          "'matched' (e.g. scenarios/grids/headline.yaml)")
    fig, axes = new(7.0, 3.4)
    ax = axes[0][0]
    labels = []
    for k, ((cond, metric), grp) in enumerate(g.groupby(["condition", "metric"], sort=True)):
        for j, arm in enumerate(("defaults", "matched")):
            row = grp[grp["arm"] == arm]
            if row.empty:
                continue
            r = row.iloc[0]
            x = k + (j - 0.5) * 0.3
            lo, hi = r["ci_lo"], r["ci_hi"]
            err = None if math.isnan(lo) else [[r["gap"] - lo], [hi - r["gap"]]]
            ax.errorbar(x, r["gap"], yerr=err, fmt=MARKERS[arm], color="#1f6fb4" if arm == "defaults" else "#888",
                        capsize=3, label=arm if k == 0 else None)
        labels.append(f"{cond}\n{metric.replace('_', ' ')}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("gap vLLM / SGLang (log)")
    ax.set_title("Engine gap under vendor defaults and with chunked prefill matched (95% CI)")
    ax.legend()
    return save(fig, out / "decomposition.png")


def _log_interval(x: np.ndarray) -> tuple[float, float, float]:
    """Geometric mean and 95% log-scale t interval over seeds (the point itself with one seed)."""
    from scipy import stats as sps
    ln = np.log(x[x > 0])
    if ln.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(ln.mean())
    if ln.size < 2:
        return (math.exp(m), math.exp(m), math.exp(m))
    half = float(sps.t.ppf(0.975, ln.size - 1)) * float(ln.std(ddof=1)) / math.sqrt(ln.size)
    return (math.exp(m), math.exp(m - half), math.exp(m + half))


def ttft_vs_rate(rt: pd.DataFrame, out: Path) -> Path:
    rt = rt.assign(rate=rt["condition"].map(_rate)).dropna(subset=["rate"])
    if rt["rate"].nunique() < 2:
        raise MissingRuns("TTFT against rate needs runs of at least two 'rate-…' conditions")
    fig, axes = new(8.0, 3.4, ncols=2)
    for ax, metric in zip(axes[0], ("ttft_p50", "ttft_p95"), strict=True):
        for (arm, cfg, src), g in rt.groupby(["arm", "config", "source"], sort=True):
            rows = [(rate, *_log_interval(s.to_numpy(float))) for rate, s in g.groupby("rate")[metric]]
            rates, mid, lo, hi = (np.array(x) for x in zip(*sorted(rows), strict=True))
            fill = color(cfg) if src == "sim" else "none"
            ax.errorbar(rates, mid, yerr=[mid - lo, hi - mid], marker=MARKERS.get(arm, "o"), color=color(cfg),
                        mfc=fill, capsize=2, label=f"{cfg} ({arm}, {src})")
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate λ (DAG/s)")
        ax.set_ylabel(f"{metric.replace('_', ' ')} (s, log; 95% CI over seeds)")
    axes[0][0].legend(fontsize=7)
    return save(fig, out / "ttft_vs_rate.png")


def throughput(rt: pd.DataFrame, out: Path) -> Path:
    if rt.empty:
        raise MissingRuns("throughput needs at least one run")
    fig, axes = new(4.2, 3.8)
    ax = axes[0][0]
    for (arm, cfg, src), g in rt.groupby(["arm", "config", "source"], sort=True):
        fill = color(cfg) if src == "sim" else "none"
        ax.scatter(g["realised_load"], g["throughput"], marker=MARKERS.get(arm, "o"), color=color(cfg),
                   facecolors=fill, label=f"{cfg} ({arm}, {src})", s=22)
    top = float(max(rt["realised_load"].max(), rt["throughput"].max())) * 1.05
    ax.plot([0, top], [0, top], "k-", lw=0.8, label="identity")
    ax.plot([0, top], [0, 0.97 * top], "k:", lw=0.8, label="keeps pace (0.97)")
    ax.set_xlabel("offered load (requests/s, realised)")
    ax.set_ylabel("achieved throughput X (requests/s)")
    ax.legend(fontsize=7)
    return save(fig, out / "throughput.png")


def ttft_cdf(runs: list[RunRecord], out: Path) -> Path:
    """Per-request TTFT CDFs pooled over seeds, one panel per condition, p95 marked."""
    pooled: dict[str, dict[str, list[np.ndarray]]] = {}
    for rec in runs:
        lab = rec.meta.get("labels", {})
        cond = str(lab.get("condition", rec.meta["scenario"].get("name")))
        key = f"{lab.get('config', rec.meta['engine'])} {lab.get('arm', '')} ({rec.meta.get('source', 'sim')})"
        m = measured(rec)
        pooled.setdefault(cond, {}).setdefault(key, []).append(m.loc[m["ok"], "ttft_s"].to_numpy())
    if not pooled:
        raise MissingRuns("TTFT CDFs need at least one run")
    conds = sorted(pooled)
    fig, axes = new(4.2 * len(conds), 3.6, ncols=len(conds))
    for ax, cond in zip(axes[0], conds, strict=True):
        for key in sorted(pooled[cond]):
            v = np.sort(np.concatenate(pooled[cond][key]))
            if not v.size:
                continue
            y = np.arange(1, v.size + 1) / v.size
            ax.plot(v, y, "--" if "matched" in key else "-", color=color(key), lw=1, label=key)
            ax.plot([np.quantile(v, 0.95)], [0.95], "|", color=color(key), ms=10)
        ax.set_xscale("log")
        ax.set_title(cond)
        ax.set_xlabel("TTFT (s, log); ticks mark p95")
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][0].legend(fontsize=7)
    return save(fig, out / "ttft_cdf.png")


def headline_figures(runs: list[RunRecord], out: Path) -> list[Path]:
    """Every figure the given runs allow; the others are listed in out/MISSING.txt with what they need.
    Drawn into a temporary sibling that replaces ``out`` when complete (``out`` new, empty or figures)."""
    from foundation.outputs import staged_dir
    final = out
    with staged_dir(final, "figures") as out:
        made, missing = _draw_all(runs, out)
        (out / "MISSING.txt").write_text("\n".join(missing) + ("\n" if missing else ""))
    return [final / p.name for p in made]


def _draw_all(runs: list[RunRecord], out: Path) -> tuple[list[Path], list[str]]:
    tables = all_tables(runs)
    made, missing = [], []
    makers: list[tuple[str, Callable[[], Path]]] = [
        ("decomposition", lambda: decomposition(tables, out)),
        ("ttft_vs_rate", lambda: ttft_vs_rate(tables["runs"], out)),
        ("throughput", lambda: throughput(tables["runs"], out)), ("ttft_cdf", lambda: ttft_cdf(runs, out))]
    rt, gaps = tables["runs"], tables["gaps"]
    makers += [("tpot_vs_rate", lambda: sf.tpot_vs_rate(rt, out)), ("fluid_model", lambda: sf.fluid(rt, out)),
               ("sharing", lambda: sf.sharing(rt, gaps, out)), ("variability", lambda: sf.variability(rt, out)),
               ("gaps_vs_rate", lambda: sf.gaps_vs(gaps, "rate", out, "gaps_vs_rate", "arrival rate λ (DAG/s)")),
               ("gap_vs_run_length", lambda: sf.gaps_vs(gaps, "duration", out, "gap_vs_run_length",
                                                        "run length T (s)")),
               ("gap_by_arm", lambda: sf.gap_by_arm(gaps, out)),
               ("gap_vs_replicas", lambda: sf.gap_vs_replicas(gaps, out)),
               ("ttft_by_turn", lambda: sf.ttft_by_turn(tables["turns"], out))]
    for name, make in makers:
        try:
            made.append(make())
        except MissingRuns as err:
            missing.append(f"{name}: {err}")
    return made, missing


def measured_vs_simulated(table: pd.DataFrame, out: Path, band: float = 0.2) -> Path:
    """One panel per metric: simulated against measured per run, identity line and a ±20 % band."""
    metrics = [m for m in ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50", "throughput") if m in set(table["metric"])]
    if table.empty or not metrics:
        raise MissingRuns("measured-vs-simulated needs the side-by-side table of `servetwin compare`")
    from matplotlib.ticker import NullFormatter
    fig, axes = new(3.0 * len(metrics), 3.2, ncols=len(metrics))
    palette = ["#1f6fb4", "#d1495b", "#3c8d2f", "#e69f00", "#7b4ea3", "#555555"]
    configs = sorted(str(c) for c in table["config"].unique())
    for ax, m in zip(axes[0], metrics, strict=True):
        t = table[(table["metric"] == m) & (table["measured"] > 0) & (table["simulated"] > 0)]
        for cfg, g in t.groupby("config", sort=True):
            ax.scatter(g["measured"], g["simulated"], s=18, color=palette[configs.index(str(cfg)) % len(palette)],
                       label=str(cfg))
        if not t.empty:
            lo = float(min(t["measured"].min(), t["simulated"].min())) * 0.7
            hi = float(max(t["measured"].max(), t["simulated"].max())) * 1.4
            xs = np.geomspace(lo, hi, 50)
            ax.plot(xs, xs, "k-", lw=0.8)
            ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="0.85", zorder=0)
            if m != "throughput":            # latencies span decades; throughput does not
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(m.replace("_", " "))
        ax.set_xlabel("measured")
    axes[0][0].set_ylabel(f"simulated (band ±{band:.0%})")
    axes[0][0].legend(fontsize=6)
    return save(fig, out / "measured_vs_simulated.png")
