"""The study's remaining figures: TPOT against rate, the fluid model, the sharing sweep, variability,
gaps across the rate sweep, and ablations (gap per arm; gap against run length). Each takes the run
table of ``analysis.tables`` (one row per run, with its condition's rate, σ and duration) and raises
MissingRuns naming the runs it needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.fluid import closed_loop_wait, fluid_wait, shortfall
from analysis.stats import geomean
from analysis.tables import _pairs
from paper_figures.style import MARKERS, MissingRuns, color, new, save


def _by_config(rt: pd.DataFrame, x: str, metric: str) -> list[tuple[str, str, str, pd.Series]]:
    out = []
    for (arm, cfg, src), g in rt.dropna(subset=[x]).groupby(["arm", "config", "source"], sort=True):
        pos = g[g[metric] > 0]
        if pos.empty:
            continue
        out.append((str(arm), str(cfg), str(src), pos.groupby(x)[metric].apply(lambda s: geomean(s)).sort_index()))
    return out


def _need(rt: pd.DataFrame, col: str, k: int, what: str) -> None:
    if rt[col].dropna().nunique() < k:
        raise MissingRuns(what)


def tpot_vs_rate(rt: pd.DataFrame, out: Path) -> Path:
    _need(rt, "rate", 2, "TPOT against rate needs runs at two or more arrival rates")
    fig, axes = new(4.6, 3.4)
    ax = axes[0][0]
    for arm, cfg, src, s in _by_config(rt, "rate", "tpot_p50"):
        ax.plot(s.index, s.values * 1000, marker=MARKERS.get(arm, "o"), color=color(cfg),
                mfc=color(cfg) if src == "sim" else "none", label=f"{cfg} ({arm}, {src})")
    ax.set_xlabel("arrival rate λ (DAG/s)")
    ax.set_ylabel("TPOT p50 (ms)")
    ax.legend(fontsize=7)
    return save(fig, out / "tpot_vs_rate.png")


def _paired(rt: pd.DataFrame) -> pd.DataFrame:
    """First and second configurations of the same condition, arm and seed (the tables' pairing)."""
    rows = []
    for cond, arm, a, b in _pairs(rt):
        for seed in a.index:
            rows.append({"condition": cond, "arm": arm, "seed": seed, "duration": a.loc[seed, "duration"],
                         "rate": a.loc[seed, "rate"], "ttft_v": a.loc[seed, "ttft_p50"],
                         "ttft_s": b.loc[seed, "ttft_p50"], "x_v": a.loc[seed, "throughput"],
                         "x_s": b.loc[seed, "throughput"]})
    return pd.DataFrame(rows)


def fluid(rt: pd.DataFrame, out: Path) -> Path:
    """Left: predicted against measured median TTFT of the slower engine (open and closed-loop models).
    Right: the gap the open model predicts against the throughput shortfall, for three run lengths."""
    p = _paired(rt)
    if p.empty:
        raise MissingRuns("the fluid model needs paired runs of two configurations (same condition and seed)")
    fig, axes = new(8.4, 3.6, ncols=2)
    ax, bx = axes[0]
    p = p.assign(delta=[shortfall(v, s) for v, s in zip(p["x_v"], p["x_s"], strict=True)])
    open_ = p["ttft_s"] + [fluid_wait(d, T) for d, T in zip(p["delta"], p["duration"], strict=True)]
    # the engine that keeps pace measures the realised arrival rate: X_s requests/s = X_s / 6 DAGs/s
    closed = p["ttft_s"] + [closed_loop_wait(v, max(s, v) / 6, [1, 4, 1], T) for v, s, T in
                            zip(p["x_v"], p["x_s"], p["duration"], strict=True)]
    ax.scatter(p["ttft_v"], open_, s=16, color="#1f6fb4", label="open fluid model")
    ax.scatter(p["ttft_v"], closed, s=16, marker="s", facecolors="none", edgecolors="#d1495b",
               label="closed-loop model")
    lim = [float(min(p["ttft_v"].min(), p["ttft_s"].min())) * 0.8, float(max(p["ttft_v"].max(), open_.max())) * 1.3]
    ax.plot(lim, lim, "k-", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured median TTFT, first configuration (s)")
    ax.set_ylabel("predicted (s)")
    ax.legend(fontsize=7)
    d = np.linspace(0, 0.6, 61)
    base = float(np.median(p["ttft_s"]))
    for T in (300, 600, 1200):
        bx.plot(d, [(base + fluid_wait(x, T)) / base for x in d], label=f"T = {T} s")
    bx.scatter(p["delta"], p["ttft_v"] / p["ttft_s"], s=14, color="k", label="runs")
    bx.set_yscale("log")
    bx.set_xlabel("throughput shortfall δ = 1 − X₁/X₂")
    bx.set_ylabel("median TTFT gap (log)")
    bx.legend(fontsize=7)
    return save(fig, out / "fluid_model.png")


def sharing(rt: pd.DataFrame, gaps: pd.DataFrame, out: Path) -> Path:
    _need(rt, "sigma", 2, "the sharing figures need runs at two or more sharing ratios σ")
    fig, axes = new(12.0, 3.4, ncols=3)
    ax, bx, cx = axes[0]
    rates = sorted(rt["rate"].dropna().unique())
    styles = ["-", "--", ":", "-."]
    for k, rate in enumerate(rates):
        for arm, cfg, src, s in _by_config(rt[rt["rate"] == rate], "sigma", "ttft_p50"):
            ax.plot(s.index, s.values, styles[k % 4], marker=MARKERS.get(arm, "o"), color=color(cfg),
                    mfc=color(cfg) if src == "sim" else "none", label=f"{cfg} ({arm}, λ={rate:g})")
    ax.set_yscale("log")
    ax.set_xlabel("prefix sharing σ")
    ax.set_ylabel("median TTFT (s)")
    ax.legend(fontsize=6)
    g = gaps[(gaps["metric"] == "ttft_p50")].dropna(subset=["sigma"]).sort_values("sigma") if not gaps.empty else gaps
    for (arm, rate), ga in (g.groupby(["arm", "rate"], sort=True) if not g.empty else []):
        err = [ga["gap"] - ga["ci_lo"].fillna(ga["gap"]), ga["ci_hi"].fillna(ga["gap"]) - ga["gap"]]
        bx.errorbar(ga["sigma"], ga["gap"], yerr=err, marker=MARKERS.get(str(arm), "o"), capsize=3,
                    ls=styles[rates.index(rate) % 4] if rate in rates else "-", label=f"{arm}, λ={rate:g}")
        for _, r in ga[ga["significant"]].iterrows():
            bx.annotate("*", (r["sigma"], r["gap"]), textcoords="offset points", xytext=(4, 4))
    bx.axhline(1.0, color="k", lw=0.8)
    bx.set_yscale("log")
    bx.set_xlabel("prefix sharing σ")
    bx.set_ylabel("paired gap, TTFT p50 (* p < 0.05)")
    bx.legend(fontsize=6)
    for k, rate in enumerate(rates):
        for arm, cfg, _src, s in _by_config(rt[rt["rate"] == rate], "sigma", "kv_peak"):
            cx.plot(s.index, s.values, styles[k % 4], marker=MARKERS.get(arm, "o"), color=color(cfg))
    cx.set_xlabel("prefix sharing σ")
    cx.set_ylabel("peak KV-cache utilisation")
    return save(fig, out / "sharing.png")


def variability(rt: pd.DataFrame, out: Path) -> Path:
    _need(rt, "rate", 2, "variability against rate needs runs at two or more arrival rates")
    fig, axes = new(8.4, 3.4, ncols=2)
    ax, bx = axes[0]
    for (arm, cfg), g in rt.dropna(subset=["rate"]).groupby(["arm", "config"], sort=True):
        tail = g.groupby("rate")["tail_ratio"].mean()
        spread = g.groupby("rate")["ttft_p50"].apply(lambda s: float(np.log(s).std(ddof=1)) if len(s) > 1 else np.nan)
        ax.plot(tail.index, tail.values, marker=MARKERS.get(str(arm), "o"), color=color(str(cfg)),
                label=f"{cfg} ({arm})")
        bx.plot(spread.index, spread.values, marker=MARKERS.get(str(arm), "o"), color=color(str(cfg)))
    ax.set_xlabel("arrival rate λ (DAG/s)")
    ax.set_ylabel("tail ratio p95/p50 of TTFT")
    bx.set_xlabel("arrival rate λ (DAG/s)")
    bx.set_ylabel("spread of run medians (sd of ln p50)")
    ax.legend(fontsize=7)
    return save(fig, out / "variability.png")


def gaps_vs(gaps: pd.DataFrame, x: str, out: Path, name: str, xlabel: str) -> Path:
    """Gap against x, only across conditions that differ in x alone (rate for run length, and so on)."""
    g = gaps.dropna(subset=[x]) if not gaps.empty else gaps
    if not g.empty:
        # the study's rate sweep changes the run length with the rate, so only σ is held for rate
        others = ["sigma"] if x == "rate" else [c for c in ("rate", "sigma") if c != x]
        others += [c for c in ("replicas", "router", "prefix_groups") if c in g and c != x]
        sizes = g.groupby(others, dropna=False)[x].transform("nunique")
        g = g[sizes >= 2]
    if g.empty or g[x].nunique() < 2:
        raise MissingRuns(f"{name} needs paired gaps at two or more values of {x} with everything else fixed")
    fig, axes = new(4.8, 3.4)
    ax = axes[0][0]
    for (arm, metric), ga in g[g["metric"].isin(["ttft_p50", "ttft_p95"])].groupby(["arm", "metric"], sort=True):
        ga = ga.sort_values(x)
        err = [ga["gap"] - ga["ci_lo"].fillna(ga["gap"]), ga["ci_hi"].fillna(ga["gap"]) - ga["gap"]]
        ax.errorbar(ga[x], ga["gap"], yerr=err, marker=MARKERS.get(str(arm), "o"), capsize=3,
                    ls="-" if metric == "ttft_p50" else "--", label=f"{arm}, {metric.replace('_', ' ')}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("paired gap (log, 95% CI)")
    ax.legend(fontsize=7)
    return save(fig, out / f"{name}.png")


def gap_by_arm(gaps: pd.DataFrame, out: Path) -> Path:
    """Ablations: the paired gap of each arm (e.g. SGLang FCFS vs LPM, block sizes, GPUs)."""
    if gaps.empty or gaps["arm"].nunique() < 2:
        raise MissingRuns("gap by arm needs paired runs in two or more arms")
    g = gaps[gaps["metric"].isin(["ttft_p50", "ttft_p95"])]
    labels = sorted({(str(c), str(a)) for c, a in zip(g["condition"], g["arm"], strict=True)})
    fig, axes = new(max(5.0, 0.9 * len(labels)), 3.6)
    ax = axes[0][0]
    for j, metric in enumerate(("ttft_p50", "ttft_p95")):
        gm = g[g["metric"] == metric].set_index(["condition", "arm"])
        xs, ys, lo, hi = [], [], [], []
        for k, key in enumerate(labels):
            if key in gm.index:
                r = gm.loc[key]
                xs.append(k + (j - 0.5) * 0.3)
                ys.append(float(r["gap"]))
                lo.append(float(r["gap"] - (r["ci_lo"] if pd.notna(r["ci_lo"]) else r["gap"])))
                hi.append(float((r["ci_hi"] if pd.notna(r["ci_hi"]) else r["gap"]) - r["gap"]))
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o" if j == 0 else "s", capsize=3, label=metric.replace("_", " "))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)), [f"{c}\n{a}" for c, a in labels], fontsize=7)
    ax.set_ylabel("paired gap (first / second configuration)")
    ax.legend(fontsize=7)
    return save(fig, out / "gap_by_arm.png")



ROUTER_STYLE = {"round_robin": ("#7f7f7f", "o"), "least_outstanding": ("#e08e0b", "s"),
                "cache_aware": ("#6a3d9a", "^"), "session": ("#17becf", "D"), "random": ("#8c564b", "v"),
                "scored": ("#2ca02c", "P")}


def gap_vs_replicas(gaps: pd.DataFrame, out: Path) -> Path:
    """Scaling: the TTFT gap against the replica count, a line per router, a panel per prefix-group count."""
    need = {"replicas", "router", "prefix_groups"}
    g = gaps[gaps["metric"].isin(["ttft_p50", "ttft_p95"])] if not gaps.empty and need <= set(gaps) else gaps
    if g.empty or not need <= set(g) or g["replicas"].nunique() < 2:
        raise MissingRuns("gap vs replicas needs paired gaps at two or more replica counts (scenarios/grids/"
                          "scaling.yaml)")
    panels = sorted(g["prefix_groups"].unique())
    fig, axes = new(4.4 * len(panels), 3.6, ncols=len(panels))
    for ax, k in zip(axes[0], panels, strict=True):
        for (router, metric), gr in g[g["prefix_groups"] == k].groupby(["router", "metric"], sort=True):
            gr = gr.sort_values("replicas")
            err = [gr["gap"] - gr["ci_lo"].fillna(gr["gap"]), gr["ci_hi"].fillna(gr["gap"]) - gr["gap"]]
            col, mark = ROUTER_STYLE.get(str(router), ("#3c8d2f", "o"))
            ax.errorbar(gr["replicas"], gr["gap"], yerr=err, marker=mark, capsize=3, color=col,
                        ls="-" if metric == "ttft_p50" else "--", alpha=1.0 if metric == "ttft_p50" else 0.5,
                        label=f"{router}, {metric.replace('_', ' ')}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{k} prefix group{'s' if k != 1 else ''}")
        ax.set_xlabel("replicas (load per replica fixed)")
    axes[0][0].set_ylabel("paired TTFT gap, first ÷ second config (log, 95% CI)")
    axes[0][0].legend(fontsize=6)
    return save(fig, out / "gap_vs_replicas.png")


def ttft_by_turn(turns: pd.DataFrame, out: Path) -> Path:
    """Multi-turn sessions: mean TTFT by turn per configuration, min–max as a band (the agent-loop post's view)."""
    if turns.empty:
        raise MissingRuns("TTFT by turn needs runs of chain sessions (scenarios/examples/agent-loop.yaml)")
    fig, axes = new(5.6, 3.6)
    ax = axes[0][0]
    for label, g in turns.groupby("configuration", sort=True):
        g = g.sort_values("turn")
        line = ax.plot(g["turn"], g["ttft_mean_ms"], marker="o", label=str(label), color=color(str(label)))
        ax.fill_between(g["turn"], g["ttft_min_ms"], g["ttft_max_ms"], alpha=0.12, color=line[0].get_color())
    ax.set_yscale("log")
    ax.set_xlabel("turn (1 = cold)")
    ax.set_ylabel("TTFT (ms, log): mean, min–max band")
    ax.legend(fontsize=6)
    return save(fig, out / "ttft_by_turn.png")
