"""Sub-command bodies: parse-free glue between the CLI and the public functions."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from foundation.errors import ServetwinError, SpecError


def _scenario(path: str, seed: int | None, sets: list[str] | None = None) -> Any:
    from scenarios.grid import apply_sets
    from scenarios.spec import load_yaml, scenario_from_dict
    from simulator.presets import parse_overrides
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    if sets:
        data = apply_sets(data, parse_overrides(sets))
    if seed is not None:
        data["seed"] = seed
    return scenario_from_dict(data, path)


def cmd_trace_compile(a: argparse.Namespace) -> int:
    from scenarios import compile_trace, validate_trace
    sc = _scenario(a.scenario, a.seed, a.set)
    t = compile_trace(sc, a.out, inputs=(a.scenario,))
    validate_trace(a.out)
    print(f"wrote {a.out}: {t.n_dags} DAGs, {t.n_requests} requests, seed {sc.seed}, trace {t.digest}")
    return 0


def cmd_trace_validate(a: argparse.Namespace) -> int:
    from scenarios import validate_trace
    t = validate_trace(a.trace)
    print(f"{a.trace}: valid ({t.n_requests} requests; all checks passed)")
    return 0


def cmd_trace_show(a: argparse.Namespace) -> int:
    from scenarios import read_trace
    if a.figure and (Path(a.figure).suffix.lower() != ".png" or Path(a.figure).is_dir()):
        raise SpecError(f"--figure {a.figure}: expected a .png file path")
    t = read_trace(a.trace)
    m = t.manifest
    roles = m["counts"]["roles"]
    nz = {k: roles[k] for k in ("planner", "worker", "aggregator", "turn") if roles.get(k)}
    base = min(nz.values()) if nz else 1
    lay = m["prompt_layout"]
    print(f"trace      {a.trace} ({t.digest})")
    print(f"scenario   {m['scenario']['name']}  seed {m['seed']}  duration {m['scenario']['duration_s']} s")
    print(f"counts     {m['counts']['dags']} DAGs, {m['counts']['requests']} requests")
    print("roles      " + ", ".join(f"{k} {v}" for k, v in nz.items()) + "  (ratio "
          + ":".join(f"{v / base:g}" for v in nz.values()) + ")")
    print(f"prompts    F={lay['prefix_tokens']} D={lay['suffix_tokens']} DAG context={lay['dag_context_tokens']}"
          f"  σ target {m['target_sharing']:.4f} achieved {m['achieved_sharing']:.4f}")
    print(f"load       offered {m['offered_load_rps']:.4f} requests/s")
    print(f"prefix     sha256 {m['prefix_sha256']}")
    imp = m.get("imported")
    if imp:
        src = m["scenario"].get("import", {})
        print(f"imported   {src.get('format')} {src.get('source')} (sha256 {str(src.get('source_sha256'))[:12]}…)"
              f"  window {src.get('window_s')}  rate ×{src.get('rate_scale')}  sample {src.get('sample')}"
              f"  max len {src.get('max_len')}  kept {m['counts']['requests']} of {src.get('rows_read')} rows")
        reuse = (f"infinite-cache hit ratio {imp['infinite_cache_hit_ratio']:.4f} over {imp['blocks']} blocks"
                 if imp["prefix_information"] else "no prefix information in this format: prompts unique (σ = 0)")
        print(f"reuse      {reuse}")
        print(f"sessions   {imp['sessions']} ({imp['follow_ups']} follow-up turns)")
        for k in ("input_tokens", "output_tokens"):
            d = imp[k]
            print(f"{k.split('_')[0]:10s} p50 {d['p50']:g}  p90 {d['p90']:g}  p99 {d['p99']:g}  mean {d['mean']:.1f}"
                  f"  max {d['max']}")
        rpm = imp["requests_per_minute"]
        print(f"rate       requests per minute: min {min(rpm)}, median {sorted(rpm)[len(rpm) // 2]}, max {max(rpm)}")
    if a.figure:
        from paper_figures.trace_figure import trace_figure
        fig = Path(a.figure)
        print(f"figure     {trace_figure(t, fig)}")
    return 0


def _window(text: str | None) -> tuple[float, float] | None:
    from foundation.errors import SpecError
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        w = (float(lo or 0), float(hi) if hi else float("inf"))
    except ValueError:
        w = (float("nan"), 0.0)
    if not sep or not (0 <= w[0] < w[1]):
        raise SpecError(f"--window {text!r}: expected START:END in seconds, 0 <= START < END (END may be empty)")
    return w


def cmd_trace_import(a: argparse.Namespace) -> int:
    from foundation.errors import SpecError
    from foundation.outputs import check_out
    from scenarios.importers import ImportOptions, import_trace
    if a.sample is not None and a.sample < 1:
        raise SpecError(f"--sample {a.sample}: expected a number of requests >= 1")
    if a.max_len is not None and a.max_len < 2:
        raise SpecError(f"--max-len {a.max_len}: expected at least 2 tokens")
    if a.max_turns < 1:
        raise SpecError(f"--max-turns {a.max_turns}: expected at least 1")
    if not 0 <= a.vocab_low <= a.vocab_high - 2:
        raise SpecError(f"--vocab-low {a.vocab_low} --vocab-high {a.vocab_high}: expected 0 <= LOW and at least "
                        "2 token ids in [LOW, HIGH)")
    check_out(a.out, "trace", (a.file,))
    opt = ImportOptions(a.format, seed=a.seed, window=_window(a.window), rate_scale=a.rate_scale, sample=a.sample,
                        vocab_high=a.vocab_high, vocab_low=a.vocab_low, rate=a.rate, tokenizer=a.tokenizer,
                        max_turns=a.max_turns, max_len=a.max_len)
    t = import_trace(a.file, opt, a.out)
    imp = t.manifest["imported"]
    print(f"wrote {a.out}: {t.n_requests} of {t.manifest['scenario']['import']['rows_read']} requests in "
          f"{t.n_dags} sessions over "
          f"{t.manifest['scenario']['duration_s']:.0f} s, infinite-cache hit ratio "
          f"{imp['infinite_cache_hit_ratio']:.3f}")
    return 0


def _trace_for(a: argparse.Namespace) -> Any:
    from scenarios.validate import validate_trace
    if a.trace:
        return validate_trace(a.trace)
    from scenarios.compiler import compile_trace
    return validate_trace(compile_trace(_scenario(a.scenario, a.seed)))


def cmd_simulate(a: argparse.Namespace) -> int:
    from analysis.records import write_run
    from foundation.outputs import check_out
    from simulator import simulate
    from simulator.presets import parse_overrides
    inputs = _inputs(a)
    check_out(a.out, "run", inputs)
    _warn_poor(a.hardware)
    spec = _cluster_spec(a)
    trace = _trace_for(a)
    if spec is None:
        rec = simulate(trace, a.engine, a.hardware, a.model, parse_overrides(a.set), a.context,
                       timeout_s=a.timeout, record_tokens=a.chunks, fast_forward=a.fast_forward)
    else:
        from simulator.cluster_run import simulate_cluster
        rec = simulate_cluster(trace, spec, a.hardware, a.model, a.context, timeout_s=a.timeout,
                               record_tokens=a.chunks, fast_forward=a.fast_forward)
    write_run(rec, a.out, inputs=inputs)
    code = _run_summary(rec, a.out)
    if spec is not None:
        _cluster_summary(rec)
    return code


def cmd_serve(a: argparse.Namespace) -> int:
    from foundation.errors import SpecError
    from foundation.outputs import OutputError, check_out
    from serve.app import Server
    from serve.main import Listen, run_foreground, save, serve_meta
    from serve.twin import TwinSpec
    from simulator.cluster import ClusterSpec
    from simulator.presets import parse_overrides
    if a.record:
        try:
            check_out(a.record, "served")
        except OutputError as err:
            raise OutputError(str(err).replace("--out", "--record", 1)) from None
    if not a.speedup > 0:
        raise SpecError(f"--speedup {a.speedup}: expected a number > 0")
    if a.default_max_tokens < 1:
        raise SpecError(f"--default-max-tokens {a.default_max_tokens}: expected a whole number ≥ 1")
    if a.tokenizer and not Path(a.tokenizer).is_dir():
        raise SpecError(f"--tokenizer {a.tokenizer}: not a directory; expected a tokenizer saved with save_pretrained")
    cluster = _cluster_spec(a) or ClusterSpec((a.engine,), overrides=tuple(sorted(parse_overrides(a.set).items())))
    server = Server(TwinSpec(cluster, a.hardware, a.model, a.context), a.speedup, a.served_model_name, a.tokenizer,
                    a.default_max_tokens)
    what = f"{'+'.join(sorted(set(cluster.engines)))} x{cluster.replicas}" if server.twin.routed else a.engine

    def ready(port: int) -> None:
        print(f"servetwin: serving {what} on {a.hardware} ({server.twin.mp.name}) at http://{a.host}:{port}/v1, "
              f"speed-up {a.speedup:g}; Ctrl-C stops", flush=True)
    try:
        run_foreground(server, Listen(a.host, a.port), ready)
    except OSError as err:
        raise SpecError(f"--host {a.host} --port {a.port}: cannot listen ({err.strerror or err})") from None
    lag = serve_meta(server)["release_lag_s"]
    tail = f"; release lag p50 {lag['p50_s'] * 1e3:.2f} ms, p99 {lag['p99_s'] * 1e3:.2f} ms" if lag["tokens"] else ""
    print(f"servetwin: served {len(server.twin.requests)} requests ({server.refused} refused, {server.failed} failed)"
          f"{tail}")
    if a.record:
        out = save(server, a.record)
        print(f"  record: {out}" if out else "  record: nothing served, nothing written")
    return 0


def _cluster_spec(a: argparse.Namespace) -> Any:
    """The cluster the flags ask for, or None for one engine (``--replicas 1`` without ``--router``)."""
    from foundation.errors import SpecError
    from simulator.cluster import ClusterSpec
    from simulator.presets import parse_overrides
    engines = tuple(e.strip() for e in a.engine.split(",") if e.strip())
    n = a.replicas
    if n < 1:
        raise SpecError(f"--replicas {n}: expected a whole number ≥ 1")
    if len(engines) not in (1, n):
        raise SpecError(f"--engine {a.engine}: {len(engines)} presets for {n} replicas; give one, or one per replica")
    if n == 1 and a.router is None and not a.router_set:
        return None
    settings = parse_overrides(a.router_set, "--router-set")
    return ClusterSpec(engines * n if len(engines) == 1 else engines, a.router or "round_robin",
                       tuple(sorted(settings.items())), tuple(sorted(parse_overrides(a.set).items())))


def _cluster_summary(rec: Any) -> None:
    cl = rec.meta["cluster"]
    served = rec.requests["replica"].value_counts().reindex(range(cl["replicas"]), fill_value=0).tolist()
    hits = ", ".join(f"{p['prefix_hit_fraction']:.2f}" for p in cl["per_replica"])
    print(f"  {cl['replicas']} replicas behind {cl['router']}: requests per replica {served}; prefix-hit fraction "
          f"per replica {hits} (all {rec.meta['telemetry_summary']['prefix_hit_fraction']:.3f})")


def _inputs(a: argparse.Namespace) -> tuple[str, ...]:
    return tuple(p for p in (getattr(a, "trace", None), getattr(a, "scenario", None),
                             getattr(a, "hardware", None), getattr(a, "model", None)) if p and Path(p).exists())


def _run_summary(rec: Any, out: str) -> int:
    """The one-line summary; exit 1 when fewer than the study's 95 % of measured requests succeeded."""
    from analysis.metrics import run_metrics
    m = run_metrics(rec)
    if m["n"] == 0:
        print(f"wrote {out}: no measured requests (the first {rec.meta['exclusion']['exclude_first_dags']} DAG of a "
              "run is excluded and this trace has no other); lengthen the scenario's duration_s or raise its rate")
        return 1
    print(f"wrote {out}: {m['n_ok']}/{m['n']} ok, TTFT p50 {m['ttft_p50']:.3f} s p95 {m['ttft_p95']:.3f} s, "
          f"TPOT p50 {m['tpot_p50'] * 1000:.1f} ms, X {m['throughput']:.3f}/s "
          f"({'keeps pace' if m['keeps_pace'] else 'falls behind'}), KV peak {m['kv_peak']:.3f}")
    if m["n_ok"] < SUCCESS_FRACTION * m["n"]:
        errs = rec.requests.loc[~rec.requests["ok"], "error"].str.replace(r"\d+", "N", regex=True).value_counts()
        kinds = ", ".join(f"{k or 'unknown'} {n}" for k, n in errs.head(5).items())
        print(f"servetwin: error: {m['n'] - m['n_ok']} of {m['n']} measured requests failed, more than the study's "
              f"{1 - SUCCESS_FRACTION:.0%} ({kinds}); the record is kept at {out}", file=sys.stderr)
        return 1
    return 0


SUCCESS_FRACTION = 0.95            # the study counts a run only when 95 % of its requests succeed


def _progress(label: str):  # type: ignore[no-untyped-def]
    from tqdm import tqdm
    bar: dict[str, Any] = {}

    def cb(done: int, total: int) -> None:
        if "b" not in bar:
            bar["b"] = tqdm(total=total, desc=label, unit="run", file=sys.stderr, leave=False)
        bar["b"].update(1)
        if done == total:
            bar["b"].close()
    return cb


def cmd_sweep(a: argparse.Namespace) -> int:
    from foundation.outputs import mark_dir
    from scenarios.grid import cells, load_grid
    from simulator.sweep import pending, run_cells
    g = load_grid(a.grid)
    cs = cells(g, 1 / 3 if a.quick else 1.0)
    mark_dir(a.out, "runs", (a.grid,))
    todo = pending(cs, a.out)
    print(f"grid {g.name}: {len(cs)} cells, {len(cs) - len(todo)} already complete")
    run_cells(cs, a.out, a.executor, a.jobs, a.address, _progress(g.name), todo=todo)
    print(f"wrote {a.out}")
    return 0


def cmd_capacity(a: argparse.Namespace) -> int:
    from analysis.metrics import KEEPS_PACE, run_metrics
    from simulator.capacity import capacity_search
    from simulator.presets import parse_overrides
    sc = _scenario(a.scenario, None)
    if a.slo:
        return _size_fleet(a, sc)
    for flag, v in (("--lo", a.lo), ("--hi", a.hi), ("--max-rate", a.max_rate)):
        if not v > 0:
            raise SpecError(f"capacity {flag} {v:g}: expected a DAG rate > 0")
    if not a.lo < a.hi:
        raise SpecError(f"capacity --lo {a.lo:g} --hi {a.hi:g}: expected --lo below --hi")
    try:
        cap = capacity_search(sc, a.engine, a.hardware, a.model, parse_overrides(a.set), a.lo, a.hi, tuple(a.seeds),
                              context=a.context, pace=a.pace, measure=run_metrics, keeps_fraction=KEEPS_PACE,
                              max_rate=a.max_rate)
    except ValueError as err:            # the search found no rate that keeps pace: say which way to widen it
        if not str(err).startswith("capacity_search:"):
            raise
        raise SpecError(str(err).removeprefix("capacity_search: ")) from None
    rule = ("geometric-mean X ≥ 0.97 × nominal offered load" if cap.pace == "nominal"
            else "every seed's X ≥ 0.97 × its realised load")
    print(f"{a.engine}: keeps pace at {cap.keeps_rate:.4f} DAG/s (offered {cap.keeps_load:.3f} requests/s, realised "
          f"{cap.realised:.3f}), sustaining X = {cap.sustained:.3f} requests/s; falls behind at {cap.fails_rate:.4f} "
          f"DAG/s ({cap.fails_load:.3f} requests/s); seeds {a.seeds}; keeps pace: {rule}")
    top = f" or reached --max-rate {a.max_rate:g}" if math.isfinite(a.max_rate) else ""
    print(f"{a.engine}: sustains at most X = {cap.saturated:.3f} requests/s (at {cap.saturated_rate:.4f} DAG/s; the "
          f"search doubled the load past the knee until X rose by < 3 %{top})")
    return 0


SLO_METRICS = ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50")


def _size_fleet(a: argparse.Namespace, sc: Any) -> int:
    """``capacity --slo``: the fewest replicas per router, and the routers compared paired by seed there."""
    from analysis.metrics import KEEPS_PACE, run_metrics
    from foundation.errors import SpecError
    from simulator.presets import parse_overrides
    from simulator.sizing import size_fleet
    slo = parse_overrides(a.slo, "--slo")
    bad = [k for k, v in slo.items() if k not in SLO_METRICS or not isinstance(v, (int, float)) or v <= 0]
    if bad:
        raise SpecError(f"--slo {bad[0]}={slo[bad[0]]}: expected METRIC=SECONDS > 0 with METRIC one of "
                        f"{', '.join(SLO_METRICS)}")
    if a.max_replicas < 1:
        raise SpecError(f"--max-replicas {a.max_replicas}: expected a whole number ≥ 1")
    rate = a.rate if a.rate is not None else sc.arrivals.rate
    routers = [r.strip() for r in a.routers.split(",") if r.strip()]
    settings = parse_overrides(a.router_set, "--router-set")
    out = []
    for router in routers:
        z = size_fleet(sc, rate, a.engine, router, slo, seeds=tuple(a.seeds), hardware=a.hardware, model=a.model,
                       overrides=parse_overrides(a.set), router_settings=settings, context=a.context,
                       max_replicas=a.max_replicas, measure=run_metrics, keeps_fraction=KEEPS_PACE)
        out.append(z)
        objective = ", ".join(f"{k} ≤ {v:g} s" for k, v in slo.items())
        if z.replicas is None:
            last = z.tried[max(z.tried)]
            why = ", ".join(f"{k} {v:.3f} s" for k, v in last.values.items())
            print(f"{a.engine} behind {router}: no fleet up to {a.max_replicas} replicas meets {objective} at {rate:g} "
                  f"DAG/s (at {last.replicas}: {why}, {'keeps pace' if last.keeps else 'falls behind'})")
            continue
        t = z.tried[z.replicas]
        got = ", ".join(f"{k} {v:.3f} s" for k, v in t.values.items())
        tried = ", ".join(f"{n} {'meets' if tr.meets else 'misses'}" for n, tr in z.tried.items())
        print(f"{a.engine} behind {router}: {z.replicas} replica(s) at {rate:g} DAG/s ({got}; seeds {a.seeds}); "
              f"tried {tried}")
    _compare_sizings(out, slo)
    return 0


def _compare_sizings(out: list[Any], slo: dict[str, float]) -> None:
    """Routers paired by seed at a replica count every one of them tried."""
    from analysis.stats import paired_gap
    common = set.intersection(*(set(z.tried) for z in out)) if len(out) > 1 else set()
    if not common:
        return
    n = max(common)
    base = out[0]
    for z in out[1:]:
        for k in slo:
            g = paired_gap(z.tried[n].per_seed[k], base.tried[n].per_seed[k])
            print(f"  at {n} replicas, {k}: {z.router} ÷ {base.router} = {g.ratio:.3f} "
                  f"(95% CI {g.lo:.3f}–{g.hi:.3f}, paired over {g.n} seeds)")


def _load(paths: list[Any]) -> list[Any]:
    from analysis.records import RecordError, find_runs, read_run
    found = find_runs(paths)
    if not found:
        raise RecordError(f"no run records under {', '.join(map(str, paths))} (a run directory holds run.json and "
                          "requests.parquet, as simulate, sweep and live run write them)")
    return [read_run(p) for p in found]


def cmd_analyze(a: argparse.Namespace) -> int:
    from analysis.tables import all_tables, to_markdown
    tables = all_tables(_load(a.runs))
    if a.format == "json":
        print(json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in tables.items() if k != "runs"},
                         indent=2))
    elif a.format == "csv":
        for k, v in tables.items():
            if k != "runs":
                print(f"# {k}")
                print(v.to_csv(index=False), end="")
    else:
        for k in ("workload", "absolute", "gaps", "decomposition", "control_arm", "dispersion"):
            print(f"## {k}\n")
            print(to_markdown(tables[k]))
        if not tables["turns"].empty:
            print("## turns (multi-turn sessions: TTFT by turn, cold vs warm)\n")
            print(to_markdown(tables["turns"]))
    return 0


def cmd_engines(a: argparse.Namespace) -> int:
    from simulator.presets import PRESETS, kv_capacity_tokens, parse_overrides, resolve
    from simulator.profiles import GIB, load_hardware, load_model
    if a.set and not a.engine:
        raise SpecError("--set needs --engine: overrides are one preset's knobs, named as that engine names them")
    hw, m = load_hardware(a.hardware), load_model(a.model)
    names = [a.engine] if a.engine else list(PRESETS)
    print(f"# {hw.name}: {hw.memory_cuda_gib:.2f} GiB (CUDA), model {m.name}: weights "
          f"{m.weight_bytes / GIB:.2f} GiB, KV {m.kv_bytes_per_token() // 1024} KiB/token, context {a.context}")
    for n in names:
        cfg = resolve(n, hw, m, a.context, parse_overrides(a.set) if a.set else None)
        fields = ", ".join(f"{k}={v!r}" for k, v in cfg.model_dump().items())
        print(f"{n}: KV capacity {kv_capacity_tokens(cfg)} tokens\n  resolved: {fields}")
    return 0


def _parse_prefill(s: str) -> tuple[int, int]:
    q, _, c = s.partition("@")
    try:
        return int(q), int(c or 0)
    except ValueError:
        raise SpecError(f"--prefill {s!r}: expected N or N@CTX (integers)") from None


def _parse_decode(s: str) -> tuple[int, int]:
    b, _, c = s.lower().partition("x")
    try:
        return int(b), int(c)
    except ValueError:
        raise SpecError(f"--decode {s!r}: expected BxCTX, e.g. 16x2048") from None


def cmd_cost(a: argparse.Namespace) -> int:
    from simulator.cost_model import BatchShape, CostModel, extends_whole_sequence
    from simulator.profiles import load_hardware, load_model
    whole = extends_whole_sequence(a.attention_backend)
    cm = CostModel(load_hardware(a.hardware), load_model(a.model), a.family, a.tp, extend_full_attention=whole)
    b = BatchShape()
    for s in a.prefill:
        q, c = _parse_prefill(s)
        b.add_prefill(q, c, True)
    for s in a.decode:
        n, c = _parse_decode(s)
        for _ in range(n):
            b.add_decode(c)
    if b.seqs == 0:
        raise SpecError("cost: give at least one --prefill or --decode")
    sc = cm.cost(b)
    bound = "compute" if sc.compute_s > sc.memory_s else "memory"
    print(f"step {sc.total_s * 1000:.2f} ms  ({bound}-bound) on {a.hardware}, {a.model}, {a.family}, TP{a.tp}"
          + (f", prefill attended over the whole sequence ({a.attention_backend})" if whole else ""))
    print(f"  compute  {sc.compute_s * 1000:8.2f} ms  ({b.prefill_tokens + b.decodes} new tokens)")
    print(f"  memory   {sc.memory_s * 1000:8.2f} ms  (weights + KV reads over {b.prefill_ctx + b.decode_ctx} "
          "context tokens)")
    print(f"  combined {1000 * (sc.total_s - sc.overhead_s - sc.comm_s):8.2f} ms  sqrt(compute² + memory²)")
    print(f"  comm     {sc.comm_s * 1000:8.2f} ms\n  overhead {sc.overhead_s * 1000:8.2f} ms  ({b.seqs} sequences)")
    if b.is_pure_decode and cm.ovh.decode_scale != 1.0:
        print(f"  x decode scale {cm.ovh.decode_scale:.3f} (measured under load): {cm.step_time(b) * 1000:.2f} ms")
    if cm.request_latency > 0:
        print(f"  + front end {cm.request_latency * 1000:.2f} ms per request (its TTFT, not the step)")
    return 0


def _client_priority(a: argparse.Namespace) -> None:
    """--realtime-client: the client's thread at SCHED_FIFO, or a warning saying why not."""
    if a.realtime_client:
        from live.priority import realtime_client
        got = realtime_client()
        if got != "fifo":
            print(f"servetwin: warning: --realtime-client: the client runs at {got}", file=sys.stderr)


def cmd_live_run(a: argparse.Namespace) -> int:
    from live.dispatcher import DispatchConfig
    from live.run import LiveOptions, run_live, summary_line
    from simulator.presets import parse_overrides
    if a.engine_pid is not None and not Path(f"/proc/{a.engine_pid}/task").is_dir():
        raise ServetwinError(f"--engine-pid {a.engine_pid}: no such process on this host (the engine must run "
                             "here, on Linux, for its processes to be accounted for); leave it out otherwise")
    trace = _trace_for(a)
    model = a.model or _first_model(a.endpoint)
    cfg = DispatchConfig(endpoint=a.endpoint, model=model, timeout_s=a.timeout, stall_s=a.timeout,
                         warmup=a.warmup, api_key_env=a.api_key_env)
    if a.chat and a.text_prompts:
        raise ServetwinError("--chat and --text-prompts: give one (chat or completions with text prompts)")
    if a.chat or a.text_prompts:
        from live.text_prompts import TextPrompts
        cfg.text_prompts = TextPrompts(trace, a.chat or a.text_prompts)
        cfg.api = "chat" if a.chat else "completions"
        # SGLang refuses return_token_ids on streamed chat (HTTP 400); chunks are counted one token each there
        cfg.return_token_ids = not a.chat
    cfg.request_id_prefix = a.request_id_prefix
    opts = LiveOptions(engine_label=a.engine_label, metrics_interval_s=a.metrics_interval,
                       prometheus_url=a.prometheus, engine_log=a.engine_log, expected=parse_overrides(a.expect),
                       engine_pid=a.engine_pid, cold_cache=a.cold_cache)
    _client_priority(a)
    rec = run_live(trace, cfg, opts, a.out)
    for w in rec.meta["config_warnings"]:
        print(f"servetwin: warning: resolved configuration differs: {w}", file=sys.stderr)
    print(f"wrote {a.out}: {summary_line(rec)}")
    if rec.meta["status"] == "interrupted":
        return 130
    return 0 if rec.meta["passed"] else 1


def cmd_live_campaign(a: argparse.Namespace) -> int:
    from live.campaign import load_campaign, run_campaign
    camp = load_campaign(a.campaign)
    _client_priority(a)
    status = run_campaign(camp, a.out)            # scenario paths are relative to the working directory
    failed = [k for k, v in status.items() if v == "failed"]
    print(f"campaign {camp.name}: {sum(v == 'passed' for v in status.values())} passed, "
          f"{sum(v == 'skipped' for v in status.values())} skipped (already done), {len(failed)} failed")
    return 1 if failed else 0


def _first_model(endpoint: str) -> str:
    import httpx
    try:
        data = httpx.get(endpoint.rstrip("/") + "/v1/models", timeout=10.0).json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as err:
        raise ServetwinError(f"could not read the served model from {endpoint}/v1/models ({type(err).__name__}); "
                             "pass --model") from None


def cmd_calibrate_probe(a: argparse.Namespace) -> int:
    from calibrate.gates import LAG_SUSPECT_S
    from calibrate.probes import ProbePlan, probe
    from foundation.outputs import check_out
    plan = ProbePlan.chunking(a.repeats) if a.chunking else ProbePlan(repeats=a.repeats)
    plan.vocab = (a.vocab[0], a.vocab[1])
    check_out(a.out, "run")
    _client_priority(a)
    rec = probe(a.endpoint, a.model or _first_model(a.endpoint), a.out, plan, a.engine_log)
    ok = int(rec.requests["ok"].sum())
    lag = rec.meta["client_lag"]
    print(f"wrote {a.out}: {ok}/{len(rec.requests)} probe requests ok; client {lag['scheduling']}, its event loop "
          f"late by {lag['p50_s'] * 1000:.2f} ms p50, {lag['p99_s'] * 1000:.1f} ms p99, "
          f"{lag['max_s'] * 1000:.0f} ms max")
    if lag["p99_s"] > LAG_SUSPECT_S:
        print(f"servetwin: warning: the client lagged {lag['p99_s'] * 1000:.0f} ms (p99) while probing: short probes "
              "carry that delay; a fit of them is likely to fail its quality gates" + (
                  "" if lag["scheduling"] == "fifo" else " (run as root or with CAP_SYS_NICE for real-time priority)"),
              file=sys.stderr)
    return 0 if ok == len(rec.requests) else 1


def cmd_calibrate_fit(a: argparse.Namespace) -> int:
    from calibrate.gpu_fit import is_probe_dir
    from calibrate.probe_fit import fit_probes
    from foundation.outputs import check_out
    check_out(a.out, "profile", a.probes)
    gpu = [is_probe_dir(p) for p in a.probes]
    if any(gpu):
        if not all(gpu):
            raise SpecError("calibrate fit: gpu-probe directories and live probe records cannot be fitted together")
        return _fit_gpu(a)
    res, obs = fit_probes(a.probes, a.engine, a.model or "tiny-llama", a.base or "cpu-base", a.out,
                          a.accept_poor_fit)
    print(f"wrote {a.out}: R² {res.r2:.4f}, MAPE {res.mape:.1%} over {len(obs)} probe shapes")
    _warn_poor(a.out)
    for k, v in res.params.items():
        print(f"  {k:14s} {v:.6g}")
    return 0


def _fit_gpu(a: argparse.Namespace) -> int:
    from calibrate.gpu_fit import fit_gpu_probes, report_lines
    res, report = fit_gpu_probes(a.probes, a.model, a.base or "h100", a.out, a.accept_poor_fit)
    print(f"wrote {a.out}: R² {res.r2:.4f}, MAPE {res.mape:.1%} over {report['fitted']['all']['n']} probe shapes "
          f"(absolute errors: the base profile as committed, roofline only, and the fitted one)")
    _warn_poor(a.out)
    for line in report_lines(report):
        print(f"  {line}")
    for k, v in res.params.items():
        print(f"  {k if k != 'step_eager_s' else 'forward_fixed_s':15s} {v:.6g}")
    return 0


def cmd_calibrate_gpu_probe(a: argparse.Namespace) -> int:
    """In this interpreter where PyTorch imports, else in ``--python`` (the probe needs only PyTorch and PyYAML)."""
    import subprocess

    from foundation.outputs import check_out
    check_out(a.out, "gpu-probe")
    args = ["--out", a.out, "--model", a.model] + (["--layers", str(a.layers)] if a.layers else []) \
        + (["--dry-run"] if a.dry_run else [])
    if a.python is None:
        try:
            import torch  # noqa: F401
        except ImportError:
            raise SpecError("calibrate gpu-probe needs PyTorch in this interpreter (pip install torch) or an "
                            "interpreter that has it: --python PATH") from None
        from calibrate.gpu_probe import main as probe_main
        return probe_main(args)
    if not Path(a.python).is_file():
        raise SpecError(f"calibrate gpu-probe --python {a.python}: no such interpreter")
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([a.python, "-m", "calibrate.gpu_probe", *args], env=env, check=False).returncode


def cmd_calibrate_decode_scale(a: argparse.Namespace) -> int:
    from calibrate.decode_load import run
    return run(a.live_run, a.hardware, a.model, a.out, a.statistic, a.accept_poor_fit)


def _warn_poor(hardware: str) -> None:
    """Print a profile's poor-fit mark (written with --accept-poor-fit), if it has one."""
    from simulator.profiles import load_hardware
    mark = load_hardware(hardware).poor_fit
    if mark:
        print(f"servetwin: warning: hardware profile {hardware} was written with --accept-poor-fit: {mark}",
              file=sys.stderr)


def cmd_twin_study(a: argparse.Namespace) -> int:
    from calibrate.twin.args import bad_options
    from calibrate.twin.study import study
    if (why := bad_options(a)) is not None:
        raise SpecError(why)
    return study(a)


def cmd_twin_diagnose(a: argparse.Namespace) -> int:
    from calibrate.twin.diagnose import entry
    return int(entry(a.name)(a.args) or 0)


def cmd_compare(a: argparse.Namespace) -> int:
    from analysis.tables import to_markdown
    from calibrate.compare import compare
    from foundation.outputs import check_out, mark_dir
    check_out(a.sim_runs, "runs", a.live_runs)
    if a.figures:
        check_out(a.figures, "figures", [*a.live_runs, a.sim_runs])
    lives = _load(a.live_runs)                 # a bad record is refused before anything is written
    _warn_poor(a.hardware)
    mark_dir(a.sim_runs, "runs", a.live_runs)
    from scenarios import read_trace
    traces = tuple(read_trace(t) for t in a.trace or ())
    tables = compare(lives, a.sim_runs, a.hardware, a.model, tuple(a.phi) if a.phi else None, traces)
    if a.figures:
        from paper_figures.figures import measured_vs_simulated
        measured_vs_simulated(tables["side_by_side"], Path(a.figures))
    if a.format == "json":
        print(json.dumps({k: json.loads(v.to_json(orient="records")) for k, v in tables.items()}, indent=2))
    elif a.format == "csv":
        for k, v in tables.items():
            print(f"# {k}")
            print(v.to_csv(index=False), end="")
    else:
        for k, v in tables.items():
            print(f"## {k}\n")
            print(to_markdown(v))
    return 0


def cmd_figures(a: argparse.Namespace) -> int:
    from foundation.outputs import check_out
    from paper_figures.figures import headline_figures
    check_out(a.out, "figures", a.runs)
    made = headline_figures(_load(a.runs), Path(a.out))
    missing = (Path(a.out) / "MISSING.txt").read_text().strip()
    print(f"wrote {len(made)} figures to {a.out}" + (f"; not drawn:\n{missing}" if missing else ""))
    return 0


def cmd_paper(a: argparse.Namespace) -> int:
    from foundation.outputs import mark_dir
    from servetwin.paper import run_paper
    mark_dir(a.out, "paper")
    return run_paper(Path(a.out), quick=a.quick, jobs=a.jobs)


def cmd_cluster_study(a: argparse.Namespace) -> int:
    from servetwin.cluster_study import run_cluster_study
    return run_cluster_study(Path(a.out), quick=a.quick)


def cmd_report(a: argparse.Namespace) -> int:
    from foundation.outputs import check_out
    from paper_figures.report import build_report
    check_out(a.out, "report", a.runs)
    out = build_report(_load(a.runs), a.out, a.title)
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    return 0
