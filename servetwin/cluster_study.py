"""``servetwin cluster-study``: two real vLLM CPU instances behind a real sglang-router, under ``cache_aware``
and then ``round_robin``, each run replayed on the same trace and simulated beside it.

Steps (about 15 minutes on a 2-core host): compile ``scenarios/examples/cluster-cpu.yaml``; start two engines,
each bound to one core; probe the first (one repetition) and fit the CPU profile the twins use; then, per router
policy: empty both prefix caches, start the router, replay the trace through it (text prompts of exact token
counts — the router takes text only — with ``X-Request-Id`` so its log names each request's worker), stop it,
read where each request went and each engine's prefix-cache counters; simulate the same trace on two replicas
behind the simulated router. Writes ``OUT/summary.md`` with the measured and simulated share of requests
routed to a replica that held their prefix, per-replica prefix-hit fractions and requests, and TTFT.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from analysis.cluster import holder_share, per_replica
from analysis.metrics import run_metrics
from analysis.records import RunRecord, write_run
from scenarios import compile_trace
from scenarios.spec import load_scenario
from scenarios.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "examples" / "cluster-cpu.yaml"
POLICIES = ("cache_aware", "round_robin")
FAMILY = "vllm-v1"                      # vLLM's CPU build runs the V1 engine


def run_cluster_study(out: Path, quick: bool = False) -> int:
    from foundation.outputs import mark_dir
    mark_dir(out, "cluster-study")
    sc = load_scenario(SCENARIO)
    if quick:
        sc = sc.model_copy(update={"duration_s": 40.0})
    trace = compile_trace(sc, out / "trace")
    live = _live(trace, out)
    rows = [_compare(trace, policy, live[policy], out) for policy in POLICIES]
    text = _summary(rows, trace, json.loads((out / "route-latency.json").read_text()))
    (out / "summary.md").write_text(text)
    print(text, end="")
    return 0


def _live(trace: Trace, out: Path) -> dict[str, RunRecord]:
    from live.local_engine import VllmCpu, free_port, tiny_model
    model = tiny_model(ROOT / ".engine-venv" / "tiny-llama")
    a = VllmCpu(model, port=free_port(), cpus="0", log_path=out / "engine-0.log")
    b = VllmCpu(model, port=free_port(), cpus="1", log_path=out / "engine-1.log")
    recs: dict[str, RunRecord] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(a)
        stack.enter_context(b)
        _profile(a, out)
        _route_latency(trace, [a.url, b.url], out)
        for policy in POLICIES:
            recs[policy] = _through_router(trace, [a.url, b.url], policy, out, str(a.log_path))
    return recs


def _profile(engine: Any, out: Path) -> None:
    """Probe one instance (one repetition) and fit the profile both twins use; a poor fit is kept, marked."""
    from calibrate.probe_fit import fit_probes
    from calibrate.probes import ProbePlan, probe
    if (out / "cpu-fitted.yaml").is_file():
        return
    plan = ProbePlan(repeats=1)
    plan.vocab = (8, 4096)
    probe(engine.url, "tiny-llama", out / "probes", plan, str(engine.log_path))
    fit_probes([out / "probes"], "vllm-v1", "tiny-llama", "cpu-base", out / "cpu-fitted.yaml", accept_poor_fit=True)


def _route_latency(trace: Trace, workers: list[str], out: Path) -> None:
    """What the router and text prompts add on idle engines (``live.route_latency``), measured once and put in
    the twins' inputs: the text's cost into the fitted profile's front-end latency (``cpu-path.yaml``), the
    router's into the simulated router's ``latency_s`` (``route-latency.json``)."""
    from calibrate.step_log import write_measured
    from live.local_engine import free_port
    from live.route_latency import measure
    from live.router import SglangRouter
    from live.text_prompts import TextPrompts
    from simulator.profiles import load_hardware
    if (out / "route-latency.json").is_file():
        return
    with SglangRouter(workers, "round_robin", free_port(), out / "router-latency.log", free_port()) as router:
        found = measure(trace, TextPrompts(trace, str(ROOT / ".engine-venv" / "tiny-llama")), workers, router.url,
                        "tiny-llama")
    fitted = out / "cpu-fitted.yaml"
    base = load_hardware(str(fitted)).overhead(FAMILY).request_s
    n = min(found.counts().values())
    write_measured(fitted, out / "cpu-path.yaml", FAMILY, {"request_s": (
        base + max(found.text_s, 0.0), f"the probe fit's {base * 1e3:.2f} ms + text prompts' own cost on an idle "
        f"engine (live.route_latency, median of {n} paired lone requests)")})
    (out / "route-latency.json").write_text(json.dumps(found.summary(), indent=2, sort_keys=True) + "\n")


def _through_router(trace: Trace, workers: list[str], policy: str, out: Path, engine_log: str) -> RunRecord:
    from live.dispatcher import DispatchConfig
    from live.local_engine import free_port
    from live.router import SglangRouter, prefix_counters, worker_of
    from live.run import LiveOptions, run_live
    from live.text_prompts import TextPrompts
    for w in workers:
        httpx.post(w + "/reset_prefix_cache", timeout=30.0)
    before = [prefix_counters(w) for w in workers]
    log = out / f"router-{policy}.log"
    with SglangRouter(workers, policy, free_port(), log, free_port()) as router:
        cfg = DispatchConfig(endpoint=router.url, model="tiny-llama", warmup=0, request_id_prefix=policy,
                             text_prompts=TextPrompts(trace, str(ROOT / ".engine-venv" / "tiny-llama")))
        rec = run_live(trace, cfg, LiveOptions(engine_label=f"router-{policy}", engine_log=engine_log),
                       out / "live" / policy)
    after = [prefix_counters(w) for w in workers]
    where = worker_of(log, policy)
    index = {w.rstrip("/"): k for k, w in enumerate(workers)}
    rec.requests["replica"] = [index.get(where.get(int(i), ""), -1) for i in rec.requests["request_id"]]
    hits = [(h1 - h0) / (q1 - q0) if q1 > q0 else float("nan")
            for (h0, q0), (h1, q1) in zip(before, after, strict=True)]
    rec.meta["cluster"] = {"replicas": len(workers), "router": policy, "router_settings": {"policy": policy},
                           "per_replica": [{"prefix_hit_fraction": h} for h in hits], "router_log": log.name}
    write_run(rec, out / "live" / policy)
    return rec


SOURCES = {"live": "measured", "sim": "simulated, steps only", "sim-path": "simulated, with the measured path"}


def _compare(trace: Trace, policy: str, live: RunRecord, out: Path) -> dict[str, Any]:
    """The live run beside two twins on the same trace: the probed profile alone (``sim``), and with what text
    prompts and the router were measured to add (``sim-path``: ``cpu-path.yaml``, the router's ``latency_s``)."""
    from calibrate.translate import translate
    from simulator.cluster import ClusterSpec
    from simulator.cluster_run import simulate_cluster
    tr = translate(live.meta["engine_config"], str(live.path))
    preset, over = tr.preset, tr.overrides
    path = json.loads((out / "route-latency.json").read_text())
    router_s = max(path["router_s"], 0.0)
    twins = {"sim": ("cpu-fitted.yaml", ()), "sim-path": ("cpu-path.yaml", (("latency_s", router_s),))}
    groups = np.asarray([trace.prefix_group(i) for i in range(trace.n_requests)])
    row: dict[str, Any] = {"policy": policy}
    recs = {"live": live}
    for name, (profile, router) in twins.items():
        spec = ClusterSpec((preset, preset), policy, router, tuple(sorted(over.items())))
        recs[name] = simulate_cluster(trace, spec, str(out / profile), "tiny-llama", context=over.get("max_model_len"))
        write_run(recs[name], out / name / policy)
    for src, rec in recs.items():
        m = run_metrics(rec)
        row[src] = {"holder_share": holder_share(rec.requests, groups),
                    "per_replica": per_replica(rec.requests, 2),
                    "hit": [p["prefix_hit_fraction"] for p in rec.meta["cluster"]["per_replica"]],
                    "ttft_p50": m["ttft_p50"], "ttft_p95": m["ttft_p95"], "ok": m["n_ok"], "n": m["n"]}
    (out / f"compare-{policy}.json").write_text(json.dumps(row, indent=2, sort_keys=True) + "\n")
    return row


def _ms(x: float, q: list[float]) -> str:
    return f"{x * 1e3:.2f} ms [{q[0] * 1e3:.2f}, {q[1] * 1e3:.2f}]"


def _summary(rows: list[dict[str, Any]], trace: Trace, path: dict[str, Any]) -> str:
    lines = [f"# Two vLLM CPU instances behind sglang-router 0.3.2: measured vs simulated ({trace.n_requests} "
             f"requests, {trace.prefix_groups} prefix groups, trace {trace.digest})", "",
             f"Measured on idle engines (live.route_latency, medians of per-prompt differences over "
             f"{min(path['requests_per_way'].values())} prompts, quartiles in brackets): text prompts add "
             f"{_ms(path['text_s'], path['text_s_quartiles'])} to a lone request's TTFT, the router "
             f"{_ms(path['router_s'], path['router_s_quartiles'])}.", "",
             "| router | source | to the prefix's holder | requests per replica | prefix-hit fraction per replica "
             "| TTFT p50 / p95 (s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        for src, what in SOURCES.items():
            v = r[src]
            reqs = " / ".join(str(p["requests"]) for p in v["per_replica"])
            hits = " / ".join(f"{h:.3f}" for h in v["hit"])
            lines.append(f"| {r['policy']} | {what} | {v['holder_share']:.3f} | {reqs} | {hits} | "
                         f"{v['ttft_p50']:.3f} / {v['ttft_p95']:.3f} |")
    return "\n".join(lines) + "\n"
