"""The twin study's per-cell report tables that describe the runs themselves: the client and the
engine's busiest process, and keeps-pace; and how well the profiles fit their probes
(``calibrate.twin.study`` assembles the report)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from analysis.metrics import KEEPS_PACE


def client_table(lives: list[Any]) -> pd.DataFrame:
    """Per configuration: the client's scheduling and its worst dispatch lag over the seeds."""
    def lag_ms(r: Any, q: str) -> float:
        return 1000 * float((r.meta.get("dispatch_lag_s") or {}).get(q, float("nan")))   # nan: not recorded

    rows = [{"config": r.meta["engine"], "client": (r.meta.get("client") or {}).get("scheduling", "not recorded"),
             "lag_p99_ms": lag_ms(r, "p99"), "lag_max_ms": lag_ms(r, "max"), **busiest_process(r)} for r in lives]
    if not rows:
        return pd.DataFrame()
    t = pd.DataFrame(rows).groupby("config").agg(client=("client", "first"), worst_lag_p99_ms=("lag_p99_ms", "max"),
                                                 worst_lag_max_ms=("lag_max_ms", "max"), process=("process", "first"),
                                                 cpu=("cpu", "mean"), waited=("waited", "mean")).reset_index()
    t["engine_busiest_process"] = [f"{p}: {c:.2f} CPU, waited {w:.0%}" if isinstance(p, str) else "—"
                                   for p, c, w in zip(t["process"], t["cpu"], t["waited"], strict=True)]
    return t.drop(columns=["process", "cpu", "waited"])


def busiest_process(r: Any) -> dict[str, Any]:
    """The engine process that ran most during a run (the forward, on these engines): its name, CPUs used
    and share of the run its threads waited for a CPU; nothing where the run did not account for them."""
    procs = (r.meta.get("host") or {}).get("engine_processes") or {}
    if not procs:
        return {"process": None, "cpu": float("nan"), "waited": float("nan")}
    name, v = max(procs.items(), key=lambda kv: kv[1]["cpu_s"])
    return {"process": name.rsplit(" ", 1)[0], "cpu": v["cpu_share"], "waited": v["wait_share"]}


def keeps_pace_table(sbs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: mean pace and the share of seeds keeping pace, measured and simulated."""
    p = sbs[sbs["metric"] == "pace_realised"]
    return p.groupby("config").agg(
        seeds=("seed", "nunique"), measured_pace=("measured", "mean"), simulated_pace=("simulated", "mean"),
        measured_keeps=("measured", lambda x: float((x >= KEEPS_PACE).mean())),
        simulated_keeps=("simulated", lambda x: float((x >= KEEPS_PACE).mean()))).reset_index()


def cpu_name(meta: dict[str, Any]) -> str:
    """The CPU a live run measured on (its ``run.json``'s ``host.cpu``: model and instruction-set extensions)."""
    cpu = (meta.get("host") or {}).get("cpu")
    if not cpu:
        return "not recorded"
    isa = ", ".join(cpu.get("isa") or []) or "none of the listed extensions"
    return f"{cpu.get('model_name') or 'unnamed CPU'} ({isa})"


def host_cpus(metas: list[dict[str, Any]]) -> str:
    """Which CPUs the live runs measured (their ``run.json``'s ``host.cpu``), with how many runs each:
    studies on different CPUs are not repeats of one another."""
    counts = Counter(cpu_name(m) for m in metas)
    return "; ".join(f"{n}: {k} run{'s' if k != 1 else ''}" for n, k in sorted(counts.items()))


def fit_table(profiles: dict[str, Path]) -> pd.DataFrame:
    """Per fitted profile (by what it is fitted for): how well it fits its probes — observations, R², MAPE —
    and which coefficients ended on a bound of the fit (there the bound set them, not the probes)."""
    rows = []
    for what, path in profiles.items():
        if not path.is_file():
            continue
        fit = (yaml.safe_load(path.read_text()) or {}).get("fit")
        if fit:
            rows.append({"profile": what, "observations": fit.get("observations"), "r2": fit.get("r2"),
                         "mape": fit.get("mape"), "at_bound": ", ".join(fit.get("at_bound") or []) or "none"})
    return pd.DataFrame(rows)


def serving_order(metas: list[dict[str, Any]], calibration_starts: list[float] | None = None) -> str:
    """How the study runs were served, from their records: "interleaved" where two configurations' runs
    overlap in time (``--interleave``: each instance paused while another served), else one instance after
    another; interleaved, whether calibration traces (``calibration_starts``: when each began) were served
    among the study runs (``--calibration-slots``) or all before them. Runs without a recorded start are left
    out."""
    spans: dict[str, tuple[float, float]] = {}
    for m in metas:
        start = (m.get("run_window") or {}).get("start_unix")
        if start is None:
            continue
        lo, hi = spans.get(m["engine"], (start, start))
        spans[m["engine"]] = (min(lo, start), max(hi, start))
    ordered = sorted(spans.values())
    if any(b[0] < a[1] for a, b in zip(ordered, ordered[1:], strict=False)):
        first = min(lo for lo, _ in ordered)
        where = ("each cell's calibration traces a slot of their own before its study slots" if
                 any(t > first for t in calibration_starts or []) else "every calibration trace before the first slot")
        return ("interleaved (each instance paused while another served; slot by slot, each cell's seed on every "
                f"configuration; {where})")
    return "one instance at a time (each served all its runs before the next started)"

