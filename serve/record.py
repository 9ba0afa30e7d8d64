"""What a server served, kept: ``--record DIR`` holds ``run/`` (a RunRecord of the served requests in the
twin's virtual time, every token's emission time in ``chunks.parquet``, the release lag in ``run.json``'s
``serve`` block) and ``trace/`` (the served requests as a trace: arrivals, token prompts, max_tokens), which
``servetwin simulate --trace DIR/trace`` replays to the same per-request times."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.records import RunRecord, write_run
from foundation.outputs import staged_dir
from scenarios.importers.build import ImportOptions, from_prompts
from scenarios.trace import Trace, seal, write_trace
from scenarios.validate import CHECKS
from serve.twin import Twin
from simulator.cluster_run import _sum_summaries, replica_telemetry
from simulator.request_log import RequestLog
from simulator.simulate import _versions

KIND = "served"


def served_trace(twin: Twin) -> Trace:
    reqs = twin.requests
    trace = from_prompts([r.send_s for r in reqs], twin.prompts, [r.max_tokens for r in reqs],
                         ImportOptions(fmt="served", source="servetwin serve"))
    for check in CHECKS.values():
        check(trace)
    seal(trace)                             # digests in memory, as a written trace has them
    return trace


def lag_summary(lags: list[float]) -> dict[str, float]:
    if not lags:
        return {"tokens": 0}
    a = np.asarray(lags)
    return {"tokens": int(a.size), "p50_s": float(np.percentile(a, 50)), "p99_s": float(np.percentile(a, 99)),
            "max_s": float(a.max())}


def served_record(twin: Twin, trace: Trace, serve_meta: dict[str, Any]) -> RunRecord:
    reqs = twin.requests
    log = RequestLog(trace, record_tokens=True)
    frame = pd.DataFrame(log.columns(reqs))
    for i, r in enumerate(reqs):
        if r.idx in twin.aborted and not (r.is_finished and not r.error):
            frame.loc[i, "error"] = "aborted by the client"
    per, tel = replica_telemetry(twin.replicas, twin.tels, label=twin.cluster is not None)
    telemetry = pd.concat(tel, ignore_index=True)
    if twin.cluster is not None:
        frame["replica"] = [twin.cluster.where.get(i, -1) for i in range(len(reqs))]
        telemetry = telemetry.sort_values(["t_s", "replica"], kind="stable").reset_index(drop=True)
    spec = twin.spec
    engines = list(spec.cluster.engines)
    blob = json.dumps([trace.digest, engines, [c.model_dump(mode="json") for c in twin.cfgs]], sort_keys=True)
    meta: dict[str, Any] = {
        "run_id": f"served-{engines[0]}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}", "source": "serve",
        "trace_digest": trace.digest, "scenario": trace.scenario, "seed": trace.seed,
        "engine": engines[0] if len(set(engines)) == 1 else "+".join(engines),
        "engine_config": twin.cfgs[0].model_dump(mode="json"), "hardware": twin.hw.name, "model": twin.mp.name,
        "offered_load_rps": float(trace.manifest["offered_load_rps"]),
        "run_window": {"start_s": 0.0, "duration_s": float(trace.scenario["duration_s"]), "end_s": twin.now},
        "exclusion": {"exclude_first_dags": 0, "warmup_requests_discarded": 0}, "request_timeout_s": 0.0,
        "telemetry_summary": per[0] if len(per) == 1 else _sum_summaries(per), "versions": _versions(),
        "busy_s": sum(p["busy_s"] for p in per), "serve": serve_meta,
    }
    if twin.cluster is not None:
        router = twin.cluster.router
        meta["cluster"] = {"replicas": len(engines), "engines": engines,
                           "engine_configs": [c.model_dump(mode="json") for c in twin.cfgs], "router": router.name,
                           "router_settings": router.params.model_dump(mode="json"), "per_replica": per}
    return RunRecord(meta=meta, requests=frame, telemetry=telemetry, chunks=pd.DataFrame(log.chunks()))


def write_served(out: str | Path, rec: RunRecord, trace: Trace) -> Path:
    """Atomically: a complete ``run/`` + ``trace/`` pair appears at ``out`` or nothing changes there."""
    with staged_dir(out, KIND) as tmp:
        write_run(rec, tmp / "run")
        write_trace(trace, tmp / "trace")
    return Path(out)
