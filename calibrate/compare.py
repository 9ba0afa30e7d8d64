"""Simulated and measured side by side: for every live run, simulate the identical trace (recompiled from
the run's scenario and seed, digest checked) with the engine model set to the live run's *resolved*
configuration and a (fitted) hardware profile; report per configuration the measured and simulated
metrics with their errors, and for each pair of configurations the measured and simulated gaps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics import run_metrics
from analysis.records import RunRecord, write_run
from analysis.stats import paired_gap, removed_fraction
from analysis.tables import phi_interval
from calibrate.translate import translate
from foundation.errors import ServetwinError
from scenarios.compiler import compile_trace
from scenarios.spec import scenario_from_dict
from scenarios.trace import Trace
from simulator.profiles import HardwareProfile
from simulator.simulate import simulate

METRICS = ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50", "throughput", "kv_peak", "prefix_hit_fraction",
           "pace_realised")


def live_trace(live: RunRecord, traces: tuple[Trace, ...] = ()) -> Trace:
    """The trace a live run replayed: recompiled from its scenario, or — for an imported trace, which cannot
    be recompiled — the one among ``traces`` whose digest it recorded."""
    if live.meta["scenario"].get("kind") == "import":
        for t in traces:
            if t.digest == live.meta["trace_digest"]:
                return t
        raise ServetwinError(f"{live.path}: the run replayed an imported trace ({live.meta['trace_digest']}); "
                             "give its directory with --trace DIR")
    sc = scenario_from_dict({**live.meta["scenario"], "seed": live.meta["seed"]}, f"{live.path}/run.json")
    return compile_trace(sc)


def twin(live: RunRecord, hardware: str | HardwareProfile, model: str, record_tokens: bool = False,
         step_log: list[dict[str, Any]] | None = None, traces: tuple[Trace, ...] = ()) -> RunRecord:
    """Simulate the live run's trace with its resolved configuration (with per-token times and a step log
    if asked)."""
    trace = live_trace(live, traces)
    if trace.digest != live.meta["trace_digest"]:
        raise ServetwinError(f"{live.path}: recompiled trace {trace.digest} differs from the run's "
                             f"{live.meta['trace_digest']}; cannot simulate the identical trace")
    tr = translate(live.meta["engine_config"], str(live.path))
    preset, over = tr.preset, tr.overrides
    ctx = over.get("max_model_len") or over.get("context_length")
    rec = simulate(trace, preset, hardware, model, over, context=ctx,
                   timeout_s=float(live.meta.get("request_timeout_s", 300.0)), record_tokens=record_tokens,
                   step_log=step_log)
    rec.meta["labels"] = {**live.meta.get("labels", {}), "config": live.meta["engine"], "twin_of": live.run_id}
    rec.meta["engine"] = live.meta["engine"]
    return rec


def twin_dir(sim_dir: Path, live: RunRecord) -> Path:
    """Where a live run's twin is written: one folder per configuration, then the live run's own folder
    name (seed-1, …), so configurations that share seed folder names never overwrite each other."""
    leaf = live.path.name if live.path else live.run_id
    return sim_dir / str(live.meta.get("engine") or "engine") / leaf


def side_by_side(pairs: list[tuple[RunRecord, RunRecord]]) -> pd.DataFrame:
    rows = []
    for live, sim in pairs:
        ml, ms = run_metrics(live), run_metrics(sim)
        for m in METRICS:
            a, b = float(ml[m]), float(ms[m])
            err = (b - a) / a if a and not math.isnan(a) and not math.isnan(b) else math.nan
            rows.append({"config": live.meta["engine"], "seed": live.meta["seed"], "metric": m, "measured": a,
                         "simulated": b, "rel_error": err})
    return pd.DataFrame(rows)


def seed_log_gaps(a: pd.Series, b: pd.Series) -> pd.Series | None:
    """ln(a / b) per seed (both indexed by seed; their common seeds), None where a value is not positive."""
    seeds = sorted(set(a.index) & set(b.index))
    x, y = a.loc[seeds].to_numpy(float), b.loc[seeds].to_numpy(float)
    if not (np.all(x > 0) and np.all(y > 0)):
        return None
    return pd.Series(np.log(x) - np.log(y), index=seeds)


def gap_comparison(table: pd.DataFrame) -> pd.DataFrame:
    """For each pair of configurations (paired by seed), the measured and simulated gaps a/b."""
    rows = []
    cfgs = sorted(table["config"].unique())
    for i, a in enumerate(cfgs):
        for b in cfgs[i + 1:]:
            for m in METRICS[:5]:
                ta = table[(table["config"] == a) & (table["metric"] == m)].set_index("seed")
                tb = table[(table["config"] == b) & (table["metric"] == m)].set_index("seed")
                seeds = sorted(set(ta.index) & set(tb.index))
                if not seeds:
                    continue
                row: dict[str, Any] = {"pair": f"{a}/{b}", "metric": m, "n": len(seeds)}
                for src in ("measured", "simulated"):
                    x, y = ta.loc[seeds, src].to_numpy(float), tb.loc[seeds, src].to_numpy(float)
                    if np.all(x > 0) and np.all(y > 0):
                        g = paired_gap(x, y)
                        row.update({f"{src}_gap": g.ratio, f"{src}_lo": g.lo, f"{src}_hi": g.hi})
                rows.append(row)
    return pd.DataFrame(rows)


def decomposition(gaps: pd.DataFrame, defaults_pair: str, matched_pair: str,
                  table: pd.DataFrame | None = None) -> pd.DataFrame:
    """φ measured and simulated from the gaps of a defaults pair and a matched pair ("a/b" labels; the
    order inside a pair does not matter: both are read as the gap table states them). With the
    side-by-side ``table`` the gaps came from, the measured φ's 95 % interval over the seeds both pairs ran
    (``measured_phi_lo``, ``measured_phi_hi``: ``analysis.stats.removed_fraction_interval``)."""
    def pick(pair: str, metric: str) -> pd.Series | None:
        a, b = pair.split("/", 1)
        for name in (f"{a}/{b}", f"{b}/{a}"):
            row = gaps[(gaps["pair"] == name) & (gaps["metric"] == metric)]
            if not row.empty:
                return row.iloc[0]
        return None
    rows = []
    for metric in ("ttft_p50", "ttft_p95", "e2e_p50", "throughput"):
        d, m = pick(defaults_pair, metric), pick(matched_pair, metric)
        if d is None or m is None:
            continue
        row: dict[str, Any] = {"metric": metric}
        for src in ("measured", "simulated"):
            phi = removed_fraction(float(d[f"{src}_gap"]), float(m[f"{src}_gap"]))
            row[f"{src}_phi"] = phi if phi is not None else math.nan
        if table is not None:
            row["measured_phi_lo"], row["measured_phi_hi"] = measured_phi_interval(
                table, str(d["pair"]), str(m["pair"]), metric)
        rows.append(row)
    return pd.DataFrame(rows)


def measured_phi_interval(table: pd.DataFrame, defaults_pair: str, matched_pair: str,
                          metric: str) -> tuple[float, float]:
    """The measured φ's 95 % interval from the per-seed log gaps of both pairs ("a/b" as the gap table
    states them), over the seeds all four configurations ran."""
    def logs(pair: str) -> pd.Series | None:
        a, b = pair.split("/", 1)
        by = {c: table[(table["config"] == c) & (table["metric"] == metric)].set_index("seed")["measured"]
              for c in (a, b)}
        return seed_log_gaps(by[a], by[b])
    return phi_interval(logs(defaults_pair), logs(matched_pair))


def compare(live_runs: list[RunRecord], sim_dir: str | Path, hardware: str, model: str,
            phi_pairs: tuple[str, str] | None = None, traces: tuple[Trace, ...] = ()) -> dict[str, pd.DataFrame]:
    pairs = []
    for live in live_runs:
        if live.meta.get("source") != "live":
            continue
        sim = twin(live, hardware, model, traces=traces)
        dest = twin_dir(Path(sim_dir), live)
        write_run(sim, dest)
        pairs.append((live, sim))
    if not pairs:
        raise ServetwinError("compare: no live runs among the inputs")
    table = side_by_side(pairs)
    gaps = gap_comparison(table)
    out = {"side_by_side": table, "gaps": gaps}
    if phi_pairs:
        out["decomposition"] = decomposition(gaps, *phi_pairs, table=table)
    return out
