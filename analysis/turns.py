"""The multi-turn agent-loop table (the PagedAttention-vs-RadixAttention post's): per configuration and turn,
TTFT mean / min / max and mean ITL over every session (no request excluded: the post counts them all), the
cold (turn 1) against warm (later turns) TTFT and its reduction, and the prefix-hit fraction.

A turn is a request's position within its session (DAG), in request order. ITL is (last token − first token) /
(output tokens − 1), the post client's definition over its stream. The prefix-hit fraction is cached ÷ prompt
tokens where the record has per-request cached tokens, else the run's telemetry fraction (the same for every
turn). ``output_tok_s`` is output tokens per second over the sessions' makespan (the post's throughput)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import RunRecord

CHAIN_ROLE = "turn"


def _label(rec: RunRecord) -> str:
    lab = rec.meta.get("labels") or {}
    cfg = lab.get("config", rec.meta.get("engine"))
    arm = lab.get("arm")
    cond = lab.get("condition", (rec.meta.get("scenario") or {}).get("name", ""))
    return " / ".join(str(x) for x in (cond, arm, cfg, rec.meta.get("source", "sim")) if x)


def turn_rows(rec: RunRecord) -> pd.DataFrame:
    """One row per request of a chain session: its turn, TTFT, ITL and prefix-hit fraction."""
    r = rec.requests
    r = r[(r["role"] == CHAIN_ROLE) & r["ok"]].sort_values(["dag_id", "request_id"])
    if r.empty:
        return pd.DataFrame(columns=["turn", "ttft_ms", "itl_ms", "hit"])
    turn = r.groupby("dag_id").cumcount() + 1
    ttft = (r["first_token_s"] - r["send_s"]) * 1000.0
    itl = (r["last_token_s"] - r["first_token_s"]) / (r["output_tokens"] - 1).clip(lower=1) * 1000.0
    tel = float((rec.meta.get("telemetry_summary") or {}).get("prefix_hit_fraction", np.nan))
    hit = (r["cached_tokens"] / r["prompt_tokens"]).where(r["cached_tokens"].notna(), tel)
    return pd.DataFrame({"turn": turn.to_numpy(), "ttft_ms": ttft.to_numpy(), "itl_ms": itl.to_numpy(),
                         "hit": hit.to_numpy()})


def turn_table(runs: list[RunRecord]) -> pd.DataFrame:
    """Per configuration (pooled over its runs) and turn; empty where no run has chain sessions."""
    pooled: dict[str, list[pd.DataFrame]] = {}
    rates: dict[str, list[float]] = {}
    for rec in runs:
        rows = turn_rows(rec)
        if not rows.empty:
            pooled.setdefault(_label(rec), []).append(rows)
            rates.setdefault(_label(rec), []).append(_output_rate(rec))
    out = []
    for label in sorted(pooled):
        df = pd.concat(pooled[label], ignore_index=True)
        rate = float(np.mean(rates[label]))
        cold = df.loc[df["turn"] == 1, "ttft_ms"].mean()
        warm = df.loc[df["turn"] > 1, "ttft_ms"].mean()
        for t, g in df.groupby("turn", sort=True):
            out.append({"configuration": label, "turn": int(t), "requests": len(g),
                        "ttft_mean_ms": g["ttft_ms"].mean(), "ttft_min_ms": g["ttft_ms"].min(),
                        "ttft_max_ms": g["ttft_ms"].max(), "itl_mean_ms": g["itl_ms"].mean(),
                        "prefix_hit": g["hit"].mean(), "cold_ms": cold, "warm_ms": warm,
                        "warm_reduction": (cold - warm) / cold if cold > 0 else np.nan,
                        "output_tok_s": rate})
    return pd.DataFrame(out)


def _output_rate(rec: RunRecord) -> float:
    """Output tokens per second from the first send to the last token (the sessions' makespan): a closed
    loop's throughput, which the study's X over a fixed duration does not measure."""
    r = rec.requests[rec.requests["ok"]]
    if r.empty:
        return float("nan")
    span = float(r["last_token_s"].max() - r["send_s"].min())
    return float(r["output_tokens"].sum()) / span if span > 0 else float("nan")
