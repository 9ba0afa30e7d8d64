"""Engine telemetry: scrape ``/metrics`` during a run and/or query a Prometheus server for the run window,
and map each engine's names (vLLM V0, vLLM V1, SGLang) onto the RunRecord's telemetry fields.
Cumulative counters (preemptions, prefix-cache hits) become per-run deltas."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pandas as pd

from analysis.records import TELEMETRY_COLUMNS

# RunRecord field -> engine series, first present wins
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_reqs_total", "sglang:num_retracted_reqs"),
    "prefix_hit_tokens": ("vllm:prefix_cache_hits_total", "sglang:cached_tokens_total"),
    "prefix_query_tokens": ("vllm:prefix_cache_queries_total", "sglang:prompt_tokens_histogram_sum"),
}
SGLANG_UNCACHED = "sglang:uncached_prompt_tokens_histogram_sum"
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([^\s]+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus exposition text → {name: [(labels, value), …]}."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            val = float(m.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, val))
    return out


def _pick(series: dict[str, list[tuple[dict[str, str], float]]], names: tuple[str, ...]) -> float:
    for n in names:
        if n in series:
            return float(sum(v for _, v in series[n]))
    return math.nan


def sample(series: dict[str, list[tuple[dict[str, str], float]]], t: float) -> tuple[float, ...]:
    g = [_pick(series, GAUGES[k]) for k in ("kv_usage", "waiting", "running")]
    c = [_pick(series, COUNTERS[k]) for k in ("preemptions", "prefix_hit_tokens", "prefix_query_tokens")]
    if math.isnan(c[1]) and SGLANG_UNCACHED in series:           # SGLang 0.5: hits = prompt − uncached
        c[1] = c[2] - _pick(series, (SGLANG_UNCACHED,))
    return (t, *g, *c)


def info_labels(series: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[str, str]:
    rows = series.get(name) or []
    return dict(rows[0][0]) if rows else {}


@dataclass
class Scraper:
    """Polls ``/metrics`` every ``interval_s`` until stopped; rows are (t from run start, fields…)."""

    url: str
    interval_s: float = 1.0
    rows: list[tuple[float, ...]] = field(default_factory=list)
    errors: int = 0

    async def run(self, client: httpx.AsyncClient, t0: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                r = await client.get(self.url, timeout=5.0)
                self.rows.append(sample(parse_metrics(r.text), time.perf_counter() - t0))
            except httpx.HTTPError:
                self.errors += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    def frame(self) -> pd.DataFrame:
        return frame(self.rows)


def frame(rows: list[tuple[float, ...]]) -> pd.DataFrame:
    cols = list(TELEMETRY_COLUMNS)
    return pd.DataFrame(rows, columns=cols) if rows else pd.DataFrame(columns=cols)


def summary(df: pd.DataFrame, window_s: float | None = None) -> dict[str, Any]:
    """Peaks and means of gauges; deltas of cumulative counters over the run (the counters count since
    the engine started, so only their change belongs to this run); with ``window_s`` (the trace's duration T)
    also the KV and waiting peaks and the preemptions of the samples within the run window (``*_window``, as
    the simulator keeps them)."""
    if df.empty:
        return {"kv_usage_peak": math.nan, "kv_usage_mean": math.nan, "preemptions": math.nan, "prefix_hit_tokens": 0,
                "prefix_query_tokens": 0, "prefix_hit_fraction": math.nan, "samples": 0}

    hits, queries = _delta(df["prefix_hit_tokens"], 0.0), _delta(df["prefix_query_tokens"], 0.0)
    return {"kv_usage_peak": float(df["kv_usage"].max()), "kv_usage_mean": float(df["kv_usage"].mean()),
            "waiting_peak": float(df["waiting"].max()), "running_peak": float(df["running"].max()),
            "preemptions": _delta(df["preemptions"], math.nan), "prefix_hit_tokens": hits,
            "prefix_query_tokens": queries,
            "prefix_hit_fraction": hits / queries if queries else math.nan, "samples": int(len(df)),
            **_window(df, window_s)}


def _window(df: pd.DataFrame, window_s: float | None) -> dict[str, Any]:
    w = df[df["t_s"] <= window_s] if window_s is not None else df.iloc[:0]
    if w.empty:
        return {}
    return {"kv_usage_peak_window": float(w["kv_usage"].max()), "waiting_peak_window": float(w["waiting"].max()),
            "preemptions_window": _delta(w["preemptions"], math.nan)}


def _delta(col: pd.Series, missing: float) -> float:
    """A counter's change over the samples; ``missing`` where the engine exports no such counter (preemptions:
    NaN, since SGLang 0.4.1 has no retraction counter — unknown, not zero)."""
    s = col.dropna()
    if s.empty:
        return missing
    return float(s.iloc[-1] - s.iloc[0])


async def prometheus_range(client: httpx.AsyncClient, base: str, start_unix: float, end_unix: float,
                           t0_unix: float, step_s: float = 5.0) -> pd.DataFrame:
    """Query a Prometheus server for the run window and return the telemetry frame (t from run start)."""
    cols: dict[str, dict[float, float]] = {}
    for fld, names in {**GAUGES, **COUNTERS}.items():
        for n in names:
            r = await client.get(base.rstrip("/") + "/api/v1/query_range",
                                 params={"query": f"sum({n})", "start": start_unix, "end": end_unix, "step": step_s})
            res = r.json().get("data", {}).get("result", [])
            if res:
                cols[fld] = {float(t) - t0_unix: float(v) for t, v in res[0]["values"]}
                break
    times = sorted({t for d in cols.values() for t in d})
    rows = [(t, *[cols.get(f, {}).get(t, math.nan) for f in TELEMETRY_COLUMNS[1:]]) for t in times]
    return frame(rows)
