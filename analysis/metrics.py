"""Metrics, defined once (over the RunRecord schema), for simulated and live runs alike.

Request: TTFT = first chunk − send; TPOT = (last − first)/(n − 1) for n ≥ 2; E2E = last − send;
ITL = gaps between successive chunks (from chunks.parquet when recorded).
Run: p50/p95 TTFT, p50 TPOT and E2E over measured requests (first DAG excluded, as recorded in the
run); achieved throughput X = requests completed within the run's duration T over T; offered load
Λ = 6λ as the trace states it and the realised load (requests whose DAG arrived before T, over T);
keeps pace when X ≥ 0.97 × realised load; KV-cache peak and mean; preemptions; prefix-hit fraction.

The KV-cache peak and the preemptions are the run window's (arrivals span T; the study pulled the engine's series
for that window) where the record has them (``telemetry_summary`` ``*_window``); ``kv_peak_run`` and
``preemptions_run`` count the drain after T as well.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.records import RunRecord

if TYPE_CHECKING:
    import pandas as pd

KEEPS_PACE = 0.97


def per_request(col: Any) -> dict[str, np.ndarray]:
    """TTFT, E2E, TPOT and dispatch lag per request, from the requests table's columns (any mapping of column
    name to array-like: a DataFrame or ``RunRecord`` columns)."""
    send, first, last = (np.asarray(col[c], dtype=np.float64) for c in ("send_s", "first_token_s", "last_token_s"))
    n = np.asarray(col["output_tokens"]).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n >= 2, (last - first) / (n - 1), np.nan)
    return {"ttft_s": first - send, "e2e_s": last - send, "tpot_s": tpot,
            "dispatch_lag_s": send - np.asarray(col["planned_s"], dtype=np.float64)}


def request_metrics(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for name, values in per_request(df).items():
        out[name] = values
    return out


def measured(rec: RunRecord) -> pd.DataFrame:
    """Requests that count: the run's exclusion rule applied (first DAG(s) dropped)."""
    k = int(rec.meta.get("exclusion", {}).get("exclude_first_dags", 1))
    df = rec.requests
    return request_metrics(df[df["dag_id"] >= k])


def itl(rec: RunRecord) -> pd.Series:
    import pandas as pd
    if rec.chunks is None or rec.chunks.empty:
        return pd.Series(dtype=float)
    c = rec.chunks.sort_values(["request_id", "t_s"])
    return c.groupby("request_id")["t_s"].diff().dropna()


def skewness(x: np.ndarray) -> float:
    """Sample skewness g1 = m3 / m2^1.5 (biased moments, as scipy.stats.skew's default; no scipy import on the
    simulate path)."""
    d = x - x.mean()
    m2 = float(np.mean(d * d))
    return float(np.mean(d ** 3)) / m2 ** 1.5 if m2 > 0 else float("nan")


def _q(s: np.ndarray, q: float) -> float:
    """Quantile over the values that are not NaN (linear interpolation, as pandas' and NumPy's default), bit for bit
    ``np.percentile(v, q * 100)``: its steps (numpy/lib/_function_base_impl.py ``_quantile``, ``_lerp``) without its
    ``np.unique`` of the partition points, which imports ``numpy.ma`` at its first call (11-14 ms of every command
    that prints a run's metrics). The same partition of the same copy, so equal values (-0.0 and 0.0) land alike."""
    v = np.asarray(s, dtype=np.float64)
    v = v[~np.isnan(v)]                            # a copy: partitioned in place, as NumPy partitions its own
    n = len(v)
    if not n:
        return float("nan")
    at = (n - 1) * ((q * 100) / 100)               # percentile divides q by 100 again; linear: (n - 1) q
    lo = -1 if at >= n - 1 else math.floor(at)     # NumPy's "above bounds": both neighbours index -1
    hi = -1 if lo == -1 else lo + 1
    v.partition(sorted({0, -1, lo, hi}))
    a, b, t = float(v[lo]), float(v[hi]), at - lo
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def _count(v: Any) -> float:
    """A counted figure as a whole number, NaN where the engine did not count it."""
    v = float(v)
    return int(v) if np.isfinite(v) else float("nan")


def run_metrics(rec: RunRecord) -> dict[str, Any]:
    """A run's metrics from its request columns (``RunRecord.column``: no DataFrame is built)."""
    k = int(rec.meta.get("exclusion", {}).get("exclude_first_dags", 1))
    keep = rec.column("dag_id") >= k                                 # ``measured``: first DAG(s) dropped
    col = {c: rec.column(c)[keep] for c in ("send_s", "first_token_s", "last_token_s", "planned_s",
                                            "output_tokens", "role", "ok")}
    good = col["ok"].astype(bool)
    ok = {c: v[good] for c, v in col.items()}
    n, n_ok = int(keep.sum()), int(good.sum())
    T = float(rec.meta["run_window"]["duration_s"])
    done_in_T = int((ok["last_token_s"] <= T).sum())
    offered = int((col["planned_s"] < T).sum())
    x = done_in_T / T
    realised = offered / T
    nominal = float(rec.meta["offered_load_rps"])
    d, lag = per_request(ok), per_request(col)["dispatch_lag_s"]
    ttft = d["ttft_s"]
    with np.errstate(invalid="ignore", divide="ignore"):
        ln = np.log(ttft[ttft > 0])
    tel = rec.meta.get("telemetry_summary", {})
    out: dict[str, Any] = {
        "run_id": rec.run_id, "engine": rec.meta["engine"], "seed": rec.meta["seed"],
        "n": n, "n_ok": n_ok, "success": n_ok / n if n else float("nan"),
        "ttft_p50": _q(ttft, 0.5), "ttft_p95": _q(ttft, 0.95), "tpot_p50": _q(d["tpot_s"], 0.5),
        "e2e_p50": _q(d["e2e_s"], 0.5), "throughput": x, "offered_load": nominal,
        "realised_load": realised,
        "pace": x / nominal if nominal > 0 else float("nan"),
        "pace_realised": x / realised if realised else float("nan"),
        "keeps_pace": bool(nominal > 0 and x >= KEEPS_PACE * nominal),
        "keeps_pace_realised": bool(realised > 0 and x >= KEEPS_PACE * realised),
        "kv_peak": float(tel.get("kv_usage_peak_window", tel.get("kv_usage_peak", np.nan))),
        "kv_peak_run": float(tel.get("kv_usage_peak", np.nan)), "kv_mean": float(tel.get("kv_usage_mean", np.nan)),
        "preemptions": _count(tel.get("preemptions_window", tel.get("preemptions", 0))),
        "preemptions_run": _count(tel.get("preemptions", 0)),
        "prefix_hit_fraction": float(tel.get("prefix_hit_fraction", np.nan)),
        "tail_ratio": _q(ttft, 0.95) / _q(ttft, 0.5) if len(ttft) else float("nan"),
        "ln_ttft_skew": skewness(ln) if len(ln) > 2 else float("nan"),
        "dispatch_lag_p50": _q(lag, 0.5), "duration_s": T,
    }
    roles = ok["role"].astype(str)
    for role in sorted(set(roles)):
        out[f"ttft_p50_{role}"] = _q(ttft[roles == role], 0.5)
    return out
