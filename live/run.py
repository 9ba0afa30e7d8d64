"""``run_live``: one live run of one engine configuration on one trace → a RunRecord.

Protocol: poll the health endpoint until ready; read the resolved configuration; send the warm-up
requests (discarded); replay the trace while scraping ``/metrics``; optionally pull the run window from
a Prometheus server; write the RunRecord. Records are appended to ``<out>.live/requests.jsonl`` as
requests finish, so an interrupted run or a failing server keeps every record received; a run passes
when ≥ 95 % of measured requests succeed, otherwise it is marked failed with counts by error kind.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

from analysis.records import RunRecord, default_exclusion, write_run
from foundation.errors import ServetwinError
from live import config_capture as cc
from live import host
from live import telemetry as tm
from live.dispatcher import DispatchConfig, Replay
from live.priority import client_scheduling
from live.records import JsonlSink, read_jsonl
from scenarios.trace import Trace

PASS_FRACTION = 0.95


class LiveError(ServetwinError):
    pass


@dataclass
class LiveOptions:
    engine_label: str
    metrics_interval_s: float = 1.0
    prometheus_url: str | None = None
    engine_log: str | None = None
    expected: dict[str, Any] | None = None
    health_timeout_s: float = 600.0
    engine_pid: int | None = None       # a local engine's process: its processes' CPU and waits are recorded
    cold_cache: bool = False            # empty the engine's prefix cache after the warm-up (as the twin starts)


# How each engine empties its prefix cache: vLLM (its server started with VLLM_SERVER_DEV_MODE=1), SGLang.
CACHE_RESETS = ("/reset_prefix_cache", "/flush_cache")


async def reset_prefix_cache(client: httpx.AsyncClient, endpoint: str, headers: dict[str, str] | None = None) -> str:
    """Empty the engine's prefix cache (nothing may be in flight): the endpoint that did it. A cache left
    from an earlier run on the same instance would serve this run's repeated prompts as hits its twin,
    which starts empty, does not have."""
    tried = []
    for path in CACHE_RESETS:
        for attempt in range(3):             # a block still held by a request just finished: try again
            r = await client.post(endpoint.rstrip("/") + path, timeout=30.0, headers=headers or {})
            if r.status_code == 404:
                break
            if _emptied(r):
                return path
            await asyncio.sleep(0.5 * (attempt + 1))
        else:
            raise ServetwinError(f"{endpoint}{path}: the engine did not empty its prefix cache (HTTP "
                                 f"{r.status_code}: {r.text.strip()[:200]})")
        tried.append(f"{path}: 404")
    raise ServetwinError(f"{endpoint}: no prefix-cache reset endpoint ({'; '.join(tried)}); vLLM exposes "
                         "/reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1, SGLang /flush_cache")


def _emptied(r: httpx.Response) -> bool:
    """HTTP 200, and not vLLM's ``{"success": false}`` (a block still held); SGLang answers in plain text."""
    if r.status_code != 200:
        return False
    try:
        body = r.json()
    except ValueError:
        return True
    return not isinstance(body, dict) or bool(body.get("success", True))


async def wait_healthy(client: httpx.AsyncClient, endpoint: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        for path in ("/health", "/v1/models"):
            try:
                r = await client.get(endpoint.rstrip("/") + path, timeout=5.0)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code} from {path}"
            except httpx.HTTPError as err:
                last = type(err).__name__
        await asyncio.sleep(0.5)
    raise LiveError(f"endpoint {endpoint} not healthy after {timeout_s:.0f} s (last: {last}); is the engine "
                    "running and the URL right?")


async def capture_config(client: httpx.AsyncClient, endpoint: str, log_path: str | None) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    server: dict[str, Any] = {}
    try:
        r = await client.get(endpoint.rstrip("/") + "/metrics", timeout=5.0)
        metrics = cc.from_metrics_info(tm.info_labels(tm.parse_metrics(r.text), "vllm:cache_config_info"))
    except httpx.HTTPError:
        pass
    for path in ("/get_server_info", "/server_info"):
        try:
            r = await client.get(endpoint.rstrip("/") + path, timeout=5.0)
            if r.status_code == 200 and r.headers.get("content-type", "").startswith("application/json"):
                server = {k: v for k, v in r.json().items() if isinstance(v, str | int | float | bool)}
                break
        except (httpx.HTTPError, ValueError):
            pass
    log = cc.parse_log(Path(log_path).read_text(errors="replace")) if log_path and Path(log_path).is_file() else {}
    return cc.resolved(log, metrics, server)


def _frames(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    req = pd.DataFrame([{k: r[k] for k in ("request_id", "dag_id", "role", "planned_s", "send_s", "first_token_s",
                                            "last_token_s", "output_tokens", "prompt_tokens", "cached_tokens", "ok",
                                            "error")} for r in rows])
    ids, ts, ns = [], [], []
    for r in rows:
        ids.extend([r["request_id"]] * len(r["chunk_times"]))
        ts.extend(r["chunk_times"])
        ns.extend(r["chunk_tokens"])
    chunks = pd.DataFrame({"request_id": np.asarray(ids, np.int64), "t_s": np.asarray(ts, float),
                           "tokens": np.asarray(ns, np.int64)})
    return req.sort_values("request_id").reset_index(drop=True), chunks


def _not_sent(trace: Trace, seen: set[int]) -> list[dict[str, Any]]:
    a, lens = trace.arrays, trace.prompt_lengths()
    return [{"request_id": i, "dag_id": int(a["dag"][i]), "role": trace.role_name(i), "planned_s": math.nan,
             "send_s": math.nan, "first_token_s": math.nan, "last_token_s": math.nan, "output_tokens": 0,
             "prompt_tokens": int(lens[i]), "cached_tokens": math.nan, "ok": False, "error": "not_sent",
             "chunk_times": [], "chunk_tokens": []} for i in range(trace.n_requests) if i not in seen]


def build_record(trace: Trace, rows: list[dict[str, Any]], meta: dict[str, Any], tel: pd.DataFrame) -> RunRecord:
    measured = [r for r in rows if not r.get("warmup")]
    seen = {int(r["request_id"]) for r in measured}
    req, chunks = _frames(measured + _not_sent(trace, seen))
    k = default_exclusion()["exclude_first_dags"]
    m = req[req["dag_id"] >= k]
    sent = m[m["error"] != "not_sent"]
    share = float(sent["ok"].mean()) if len(sent) else 0.0
    errors = {str(e): int(n) for e, n in m.loc[~m["ok"], "error"].value_counts().items()}
    lag = (sent["send_s"] - sent["planned_s"]).dropna()
    meta = {**meta, "status": meta.get("status", "complete"),
            "passed": bool(share >= PASS_FRACTION and meta.get("status", "complete") == "complete"),
            "success_fraction": share, "errors_by_kind": errors,
            "telemetry_summary": tm.summary(tel, float(trace.scenario["duration_s"])),
            "dispatch_lag_s": {"p50": float(lag.quantile(0.5)) if len(lag) else math.nan,
                               "p99": float(lag.quantile(0.99)) if len(lag) else math.nan,
                               "max": float(lag.max()) if len(lag) else math.nan}}
    if len(lag) and (p99 := float(lag.quantile(0.99))) > CLIENT_LAG_WARN_S:
        meta["measurement_warnings"] = [*meta.get("measurement_warnings", []), client_lag_warning(p99)]
    return RunRecord(meta=meta, requests=req, telemetry=tel, chunks=chunks)


CLIENT_LAG_WARN_S = 0.010     # a client this late on 1 % of its sends is also late reading chunks


def client_lag_warning(p99_s: float) -> str:
    return (f"client lag: 1 % of requests were sent over {p99_s * 1000:.0f} ms after their planned time; the "
            "client was kept off a CPU, so its timestamps include its own queueing (a client sharing cores with "
            "the engine: run it with --realtime-client, or on another host)")


def _run_id(trace: Trace, label: str, t_unix: float) -> str:
    h = hashlib.sha256(f"{trace.digest}{label}{t_unix}".encode()).hexdigest()[:10]
    return f"live-{label}-s{trace.seed}-{h}"


async def _run(trace: Trace, cfg: DispatchConfig, opts: LiveOptions, out: Path) -> RunRecord:
    journal = out.parent / f".{out.name}.live"
    journal.mkdir(parents=True, exist_ok=True)
    sink = JsonlSink(journal / "requests.jsonl")
    conns = trace.max_connections or trace.max_concurrency or cfg.max_connections  # the scenario's client, else ours
    limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
    status = "complete"
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(cfg.timeout_s, connect=10.0)) as client:
        await wait_healthy(client, cfg.endpoint, opts.health_timeout_s)
        resolved = await capture_config(client, cfg.endpoint, opts.engine_log)
        warn = cc.mismatches(opts.expected or {}, resolved)
        replay = Replay(trace, cfg, sink, client)
        await replay.warmup()
        flushed = await reset_prefix_cache(client, cfg.endpoint, cfg.headers()) if opts.cold_cache else None
        scraper = tm.Scraper(cfg.endpoint.rstrip("/") + "/metrics", opts.metrics_interval_s)
        stop = asyncio.Event()
        host0 = host.sample(engine_pid=opts.engine_pid)
        t0 = replay.start_clock()
        start_unix = time.time() - (time.perf_counter() - t0)     # the wall time of the records' t = 0
        scrape = asyncio.create_task(scraper.run(client, t0, stop))
        try:
            await replay.run()
        except (asyncio.CancelledError, KeyboardInterrupt):
            status = "interrupted"
            for t in list(replay.tasks):
                t.cancel()
            await asyncio.gather(*list(replay.tasks), return_exceptions=True)
        finally:
            stop.set()
            await asyncio.gather(scrape, return_exceptions=True)
            sink.close()
        end_unix = time.time()
        host_state = host.summary(host0, host.sample(engine_pid=opts.engine_pid), end_unix - start_unix)
        tel = scraper.frame()
        if opts.prometheus_url:
            try:
                tel = await tm.prometheus_range(client, opts.prometheus_url, start_unix, end_unix, start_unix,
                                                max(opts.metrics_interval_s, 1.0))
            except (httpx.HTTPError, ValueError, KeyError):
                warn.append("prometheus: range query failed; telemetry from /metrics scrapes")
    meta = {"run_id": _run_id(trace, opts.engine_label, start_unix), "source": "live",
            "trace_digest": trace.digest, "scenario": trace.scenario, "seed": trace.seed,
            "engine": opts.engine_label, "engine_config": resolved, "config_warnings": warn,
            "hardware": "live", "model": cfg.model, "offered_load_rps": float(trace.manifest["offered_load_rps"]),
            "run_window": {"start_s": 0.0, "duration_s": float(trace.scenario["duration_s"]),
                           "end_s": end_unix - start_unix, "start_unix": start_unix},
            "exclusion": {**default_exclusion(), "warmup_requests_discarded": cfg.warmup},
            "versions": _versions(), "endpoint": cfg.endpoint, "status": status,
            "request_timeout_s": cfg.timeout_s, "host": host_state, "client": {"scheduling": client_scheduling()},
            "prefix_cache_reset": flushed}
    rec = build_record(trace, read_jsonl(journal / "requests.jsonl"), meta, tel)
    write_run(rec, out, extra={"requests.jsonl": (journal / "requests.jsonl").read_bytes()})
    return rec


def _versions() -> dict[str, str]:
    from analysis.records import servetwin_version
    return {"servetwin": servetwin_version(), "httpx": httpx.__version__}


def run_live(trace: Trace, cfg: DispatchConfig, opts: LiveOptions, out: str | Path) -> RunRecord:
    """Run and write the RunRecord (also on Ctrl-C: the record then says status 'interrupted')."""
    from foundation.outputs import check_out
    out = check_out(out, "run")
    journal = out.parent / f".{out.name}.live" / "requests.jsonl"
    if journal.exists():
        journal.unlink()
    return run_loop(_run(trace, cfg, opts, out))


def run_loop(coro: Any) -> Any:
    """Run on uvloop when installed (about half the per-chunk overhead of asyncio's loop), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def summary_line(rec: RunRecord) -> str:
    m = rec.meta
    return (f"{m['status']}, {'passed' if m['passed'] else 'FAILED'}: {m['success_fraction']:.1%} ok"
            + (f", errors {json.dumps(m['errors_by_kind'])}" if m["errors_by_kind"] else "")
            + f", dispatch lag p50 {m['dispatch_lag_s']['p50'] * 1000:.2f} ms"
            + f" / p99 {m['dispatch_lag_s']['p99'] * 1000:.2f} ms"
            + ("" if not m.get("client") else f" (client {m['client']['scheduling']})")
            + _host_words(m.get("host") or {})
            + "".join(f"\n  warning: {w}" for w in m.get("measurement_warnings", [])))


def _host_words(h: dict[str, Any]) -> str:
    parts = [f"{k} {h[f'cpu_{k}_share']:.1%}" for k in ("steal", "pressure") if h.get(f"cpu_{k}_share") is not None]
    return f", host CPU {' / '.join(parts)}" if parts else ""
