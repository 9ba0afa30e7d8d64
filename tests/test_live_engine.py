"""Integration against a real engine here: vLLM's CPU build serving a tiny random-weight Llama, scraped by a
real Prometheus server; `servetwin live run` end to end; the engine killed mid-run."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from analysis.metrics import run_metrics
from analysis.records import read_run
from calibrate.translate import translate
from live.dispatcher import DispatchConfig
from live.local_engine import ROOT, VllmCpu, tiny_model
from live.run import LiveOptions, run_live
from scenarios import compile_trace, scenario_from_dict

pytestmark = pytest.mark.xdist_group("engine")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def small_trace(duration: float = 20.0, seed: int = 1):  # type: ignore[no-untyped-def]
    return compile_trace(scenario_from_dict({
        "seed": seed, "duration_s": duration, "arrivals": {"kind": "gamma", "rate": 0.4},
        "prompts": {"length": 1024, "sharing": 0.9, "vocab_low": 2, "vocab_high": 4000},
        "outputs": {"planner": 16, "worker": 16, "aggregator": 32},
        "tools": {"mcp": {"kind": "lognormal", "median_s": 0.2, "p95_s": 1.0, "max_s": 5}}}))


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return tiny_model(ROOT / ".engine-venv" / "tiny-llama")


@pytest.fixture(scope="module")
def engine(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("eng")
    eng = VllmCpu(model_dir, port=free_port(), log_path=d / "vllm.log", step_log=d / "vllm.steps")
    eng.start()
    yield eng
    eng.stop()


@pytest.fixture(scope="module")
def prometheus(engine: VllmCpu, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    exe = shutil.which("prometheus")
    assert exe, "Debian's prometheus is not installed (make test installs it)"
    d = tmp_path_factory.mktemp("prom")
    (d / "prometheus.yml").write_text(
        f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: engine\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{engine.port}']\n")
    port = free_port()
    proc = subprocess.Popen([exe, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(60):
        try:
            if httpx.get(url + "/-/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(10)


def test_live_run_against_vllm_with_prometheus(engine: VllmCpu, prometheus: str, tmp_path: Path):
    trace = small_trace()
    trace_dir = tmp_path / "trace"
    from scenarios.trace import write_trace
    write_trace(trace, trace_dir)
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "servetwin.cli", "live", "run", "--trace", str(trace_dir),
                        "--endpoint", engine.url, "--engine-label", "vllm-cpu-apc", "--out", str(out), "--warmup", "3",
                        "--prometheus", prometheus, "--engine-log", str(engine.log_path), "--metrics-interval", "1",
                        "--expect", "enable_prefix_caching=true", "block_size=16", "--realtime-client",
                        "--engine-pid", str(engine.pid), "--cold-cache"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "block_size: expected 16, engine resolved 32" in r.stderr      # mismatch warned, not hidden
    rec = read_run(out)
    req = rec.requests
    assert len(req) == trace.n_requests and req["ok"].all()
    assert (req["output_tokens"] == trace.arrays["max_tokens"]).all()
    assert rec.chunks is not None and int(rec.chunks["tokens"].sum()) == int(req["output_tokens"].sum())
    assert (req["first_token_s"] > req["send_s"]).all() and (req["last_token_s"] >= req["first_token_s"]).all()
    cfg = rec.meta["engine_config"]
    assert cfg["enable_prefix_caching"] is True and cfg["block_size"] == 32 and cfg["version"]
    tr = translate(cfg)                  # the real engine's resolved configuration → its simulated twin's preset
    assert (tr.engine, tr.preset) == ("vllm", "vllm-v1") and tr.overrides["block_size"] == 32
    assert tr.overrides["enable_prefix_caching"] is True and tr.overrides["num_gpu_blocks"] > 0
    procs = rec.meta["host"]["engine_processes"]             # the engine's own processes, accounted for
    worker = [v for k, v in procs.items() if k.startswith("VLLM::Worker")]
    assert worker and worker[0]["cpu_s"] > 0 and any(k.startswith("VLLM::EngineCor") for k in procs)
    assert rec.meta["prefix_cache_reset"] == "/reset_prefix_cache"          # --cold-cache: emptied after warm-up
    tel = rec.meta["telemetry_summary"]
    assert tel["samples"] >= 5 and tel["prefix_hit_tokens"] > 0 and tel["kv_usage_peak"] >= 0   # from Prometheus
    m = run_metrics(rec)
    lag = rec.meta["dispatch_lag_s"]
    assert m["ttft_p50"] > 0 and m["tpot_p50"] > 0 and 0 <= lag["p50"] <= lag["max"]
    assert rec.meta["host"]["cpus"] >= 1 and rec.meta["host"]["cpu_steal_s"] >= 0   # the host's state over the run
    # --realtime-client: SCHED_FIFO where permitted (root here), else a warning saying why; the record says which
    warned = "--realtime-client: the client runs at normal" in r.stderr
    assert rec.meta["client"]["scheduling"] == ("normal" if warned else "fifo")


def test_vllm_step_log_splits_each_requests_ttft(engine: VllmCpu, tmp_path: Path):
    """vLLM's own iteration log, routed to a file with Unix times (live.vllm_steplog): every request's first
    token is matched to the forward that prefilled it, and its TTFT splits into admission, that forward and
    the output path — parts that add up to the TTFT the client measured."""
    from calibrate.streams import split_ttft
    from live.vllm_steplog import read_steps
    # the study's window (MATCH_S, 100 ms) is for a host that runs nothing else; here the other test worker
    # shares the two cores and first tokens have streamed 146-190 ms after their forward's log line. A wider
    # window may pair two workers sent together with each other's forwards; what is asserted holds either way.
    match_s = 0.5
    trace = small_trace(duration=20.0, seed=4)
    rec = run_live(trace, DispatchConfig(endpoint=engine.url, model="tiny-llama", warmup=2),
                   LiveOptions("steps", engine_log=str(engine.log_path), cold_cache=True), tmp_path / "run")
    assert engine.step_log is not None
    steps = read_steps(engine.step_log)
    assert (steps["ctx_tokens"] > 0).any() and (steps["gen_requests"] > 0).any() and (steps["elapsed_s"] > 0).all()
    rows = split_ttft(rec, steps, match_s)
    assert len(rows) >= 0.9 * len(rec.requests)
    assert (rows["prefill_s"] > 0).all() and (rows["admission_s"] > 0).all()
    assert rows["output_s"].between(0, match_s).all() and rows["output_s"].median() < 0.1
    parts = rows["admission_s"] + rows["prefill_s"] + rows["output_s"]
    assert (parts - rows["ttft_s"]).abs().max() < 1e-9
    assert "Iteration(" not in engine.log_path.read_text()          # the step lines go to the step log only


def test_engine_killed_mid_run_keeps_every_record(model_dir: Path, tmp_path: Path):
    eng = VllmCpu(model_dir, port=free_port(), log_path=tmp_path / "vllm.log")
    eng.start()
    trace = small_trace(duration=40.0, seed=2)
    journal = tmp_path / ".run.live" / "requests.jsonl"
    stop = threading.Event()

    def kill_after_some_records() -> None:      # the server dies once 8 requests have completed
        while not stop.is_set():
            if journal.is_file() and len(journal.read_text().splitlines()) >= 8:
                eng.kill()
                return
            time.sleep(0.05)
    killer = threading.Thread(target=kill_after_some_records)
    killer.start()
    try:
        rec = run_live(trace, DispatchConfig(endpoint=eng.url, model="tiny-llama", warmup=2, timeout_s=30),
                       LiveOptions(engine_label="doomed"), tmp_path / "run")
    finally:
        stop.set()
        killer.join()
        eng.stop()
    req = rec.requests
    assert len(req) == trace.n_requests
    assert req["ok"].any() and not req["ok"].all()
    assert set(req.loc[~req["ok"], "error"]) <= {"connect", "reset", "not_sent", "timeout", "short"}
    assert rec.meta["passed"] is False and rec.meta["errors_by_kind"]
    assert read_run(tmp_path / "run").requests["ok"].sum() == req["ok"].sum()


def test_compare_two_cpu_configurations(engine: VllmCpu, model_dir: Path, tmp_path: Path):
    """The whole twin loop at a small scale: probe, fit, two live configurations, simulated twins."""
    import math

    from calibrate.compare import compare
    from calibrate.probe_fit import fit_probes
    from calibrate.probes import ProbePlan, probe
    plan = ProbePlan(prefill_lengths=(64, 512, 2048), cached=((1024, 64),), decode_batches=(1, 4, 8), repeats=1,
                     decode_tokens=32)
    probe(engine.url, "tiny-llama", tmp_path / "probe", plan, str(engine.log_path))
    # the loop, not the fit's quality, is under test: a one-repeat plan at normal priority on a loaded CI host
    # can fail the gates (test_the_documented_calibration_recipe… holds the recipe to them)
    fit_probes([tmp_path / "probe"], "vllm-v1", "tiny-llama", "cpu-base", tmp_path / "cpu.yaml", accept_poor_fit=True)
    trace = small_trace(duration=25.0, seed=3)
    dcfg = DispatchConfig(endpoint=engine.url, model="tiny-llama", warmup=2)
    run_live(trace, dcfg, LiveOptions("apc-on", engine_log=str(engine.log_path)), tmp_path / "live" / "apc-on")
    off = VllmCpu(model_dir, port=free_port(), enable_prefix_caching=False, log_path=tmp_path / "off.log").start()
    try:
        dcfg = DispatchConfig(endpoint=off.url, model="tiny-llama", warmup=2)
        run_live(trace, dcfg, LiveOptions("apc-off", engine_log=str(off.log_path)), tmp_path / "live" / "apc-off")
    finally:
        off.stop()
    lives = [read_run(tmp_path / "live" / k) for k in ("apc-on", "apc-off")]
    tables = compare(lives, tmp_path / "sim", str(tmp_path / "cpu.yaml"), "tiny-llama")
    sbs = tables["side_by_side"]
    assert set(sbs["config"]) == {"apc-on", "apc-off"}
    assert {"measured", "simulated", "rel_error"} <= set(sbs.columns)
    core = sbs[sbs["metric"].isin(["ttft_p50", "tpot_p50", "e2e_p50", "throughput"])]
    assert all(math.isfinite(e) for e in core["rel_error"])
    gaps = tables["gaps"]
    assert set(gaps["pair"]) == {"apc-off/apc-on"} and gaps["measured_gap"].notna().all()
    assert (tmp_path / "sim" / "apc-on" / "apc-on" / "run.json").is_file()     # SIM/<config>/<run folder>


def test_sglang_cpu_serves_with_radix_hits_and_compares(model_dir: Path, tmp_path: Path):
    """SGLang on its CPU path: starts, serves a seeded agent trace with radix hits, resolves its
    configuration, and its simulated twin builds a comparison at a small scale. Its scheduler's step log
    records the forwards it ran, a batched probe's requests prefilled together among them."""
    import math

    from calibrate.compare import compare
    from calibrate.engine_steps import priced, read_forwards
    from calibrate.probe_fit import fit_probes
    from calibrate.probes import ProbePlan, probe
    from live.local_engine import SglangCpu
    from simulator.cost_model import CostModel
    from simulator.profiles import load_hardware, load_model
    eng = SglangCpu(model_dir, port=free_port(), log_path=tmp_path / "sglang.log", step_log=tmp_path / "steps").start()
    try:
        plan = ProbePlan(prefill_lengths=(64, 512, 2048), cached=((1024, 64),), decode_batches=(1, 4, 8), repeats=1,
                         decode_tokens=32, batched=((1024, 64, 4),))
        probe(eng.url, "tiny-llama", tmp_path / "probe", plan, str(eng.log_path))
        trace = small_trace(duration=25.0, seed=4)
        rec = run_live(trace, DispatchConfig(endpoint=eng.url, model="tiny-llama", warmup=2),
                       LiveOptions("sglang-lpm", engine_log=str(eng.log_path), expected=eng.expected()),
                       tmp_path / "live" / "sglang")
        # the same trace's first seconds again, the radix cache emptied first: its first request hits nothing
        again = run_live(small_trace(duration=11.0, seed=4), DispatchConfig(endpoint=eng.url, model="tiny-llama",
                         warmup=2), LiveOptions("sglang-lpm", cold_cache=True), tmp_path / "again")
    finally:
        eng.stop()
    first = again.requests.sort_values("send_s").iloc[0]
    assert again.meta["prefix_cache_reset"] == "/flush_cache" and first["cached_tokens"] == 0
    same = rec.requests.set_index("request_id").loc[int(first["request_id"])]
    assert same["prompt_tokens"] == first["prompt_tokens"]                 # the request it repeats
    req = rec.requests
    assert req["ok"].all() and (req["cached_tokens"] > 0).sum() > len(req) // 2      # radix hits per request
    cfg = rec.meta["engine_config"]
    assert cfg["schedule_policy"] == "lpm" and cfg["page_size"] == 1 and not rec.meta["config_warnings"]
    tr = translate(cfg)
    assert (tr.engine, tr.preset) == ("sglang", "sglang-current") and tr.overrides["schedule_policy"] == "lpm"
    assert tr.overrides["max_total_tokens"] == eng.max_total_tokens and tr.overrides["chunked_prefill_size"] > 0
    assert rec.meta["telemetry_summary"]["prefix_hit_tokens"] > 0
    res, _ = fit_probes([tmp_path / "probe"], "sglang", "tiny-llama", "cpu-base", tmp_path / "cpu-sglang.yaml",
                        accept_poor_fit=True)                 # its own bounds below; the gates hold the recipe
    assert "per_prefill_seq_s" in res.params                              # freed by the batched probe
    runs = read_forwards(tmp_path / "steps")
    extends = [r for r in runs if r["mode"] == "EXTEND"]
    assert any(len(r["reqs"]) > 1 and all(q == 64 and c == 1024 for _, q, c in r["reqs"]) for r in extends)
    assert {r["mode"] for r in runs} >= {"EXTEND", "DECODE"}
    cost = CostModel(load_hardware(str(tmp_path / "cpu-sglang.yaml")), load_model("tiny-llama"), "sglang", 1, 1 << 20,
                     True)
    # the engine's first, cold forwards priced by a fit that leaves them in: ~20x. A fit that prices them
    # right lands near 1 on a quiet machine; with the other test worker busy on a 2-core host without
    # AVX-512 the forwards ran 2.7x (extends) and 3.7x (decodes) the probes' fit, so the bound is 5
    ratios = priced(runs, cost).groupby("mode")["ratio"].median()
    assert ratios[["EXTEND", "DECODE"]].between(0.2, 5).all(), ratios
    t = compare([read_run(tmp_path / "live" / "sglang")], tmp_path / "sim", str(tmp_path / "cpu-sglang.yaml"),
                "tiny-llama")
    core = t["side_by_side"][t["side_by_side"]["metric"].isin(["ttft_p50", "e2e_p50", "throughput"])]
    assert all(math.isfinite(e) for e in core["rel_error"])


def test_chat_path_with_exact_text_prompts(engine: VllmCpu, model_dir: Path, tmp_path: Path):
    """/v1/chat/completions with text prompts: the server counts the trace's tokens plus the chat template's."""
    import json

    trace = small_trace(duration=8.0, seed=5)
    from scenarios.trace import write_trace
    write_trace(trace, tmp_path / "trace")
    r = subprocess.run([sys.executable, "-m", "servetwin.cli", "live", "run", "--trace", str(tmp_path / "trace"),
                        "--endpoint", engine.url, "--engine-label", "chat", "--out", str(tmp_path / "run"),
                        "--warmup", "1", "--chat", str(model_dir)], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    rows = [x for x in rows if not x["warmup"]]
    assert rows and all(x["ok"] for x in rows)
    overhead = [x["server_prompt_tokens"] - x["prompt_tokens"] for x in rows]
    # the template adds a fixed number of tokens; a merge at its seam with the text may move one token
    assert max(overhead) - min(overhead) <= 1 and min(overhead) >= 0


def test_the_documented_calibration_recipe_fits_within_its_gates_or_says_why(tmp_path: Path):
    """docs/live.md's recipe as a user runs it: the launcher in the background, `calibrate probe` and
    `calibrate fit` as documented. The fit passes its documented gates (calibrate.gates: R² ≥ 0.98, MAPE ≤ 10 %)
    or is refused with one line naming its cause; the launcher stops its engine on SIGTERM. How close a fit comes
    on a given host (R² 0.9876 … 0.9999 on shared 2-core hosts) is a measurement, reported in docs/live.md, not
    asserted here: a CI host's neighbours move it."""
    import json
    import os
    import signal

    import yaml
    port, log = free_port(), tmp_path / "vllm-engine.log"
    launcher = subprocess.Popen([sys.executable, "-m", "live.local_engine", "--port", str(port), "--log", str(log)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    try:
        assert "serving tiny-llama" in (launcher.stdout.readline() if launcher.stdout else "")
        st = [sys.executable, "-m", "servetwin.cli"]
        probe = subprocess.run([*st, "calibrate", "probe", "--endpoint", f"http://127.0.0.1:{port}", "--engine-log",
                                str(log), "--out", str(tmp_path / "probes")], cwd=ROOT, capture_output=True,
                               text=True)
        assert probe.returncode == 0, probe.stderr
        lag = json.loads((tmp_path / "probes" / "run.json").read_text())["client_lag"]
        assert lag["samples"] > 100 and "client" in probe.stdout
        fit = subprocess.run([*st, "calibrate", "fit", str(tmp_path / "probes"), "--engine", "vllm-v1", "--model",
                              "tiny-llama", "--base", "cpu-base", "--out", str(tmp_path / "fitted.yaml")], cwd=ROOT,
                             capture_output=True, text=True)
        if fit.returncode == 1:          # refused: one line with its cause, nothing written
            assert len(fit.stderr.strip().splitlines()) == 1 and "quality gates" in fit.stderr, fit.stderr
            assert not (tmp_path / "fitted.yaml").exists()
            pytest.skip(f"this host's probes were refused with their cause: {fit.stderr.strip()}")
        assert fit.returncode == 0, fit.stderr
        q = yaml.safe_load((tmp_path / "fitted.yaml").read_text())["fit"]
        from calibrate.gates import MAPE_MAX, R2_MIN
        assert q["r2"] >= R2_MIN and q["mape"] <= MAPE_MAX, (q["r2"], q["mape"], lag)
    finally:
        os.kill(launcher.pid, signal.SIGTERM)                 # as a script or a service manager stops it
        rc = launcher.wait(60)
    assert rc == 0
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)    # its engine went with it


def test_live_run_through_the_real_sglang_router(engine: VllmCpu, model_dir: Path, tmp_path: Path):
    """sglang-router 0.3.2 (make router) in front of the engine: text prompts on /v1/completions keep the trace's
    exact token counts, and the router's debug log names the worker of every request by its X-Request-Id."""
    import json

    from live.router import SglangRouter, prefix_counters, worker_of
    from scenarios.trace import write_trace
    trace = small_trace(duration=20.0, seed=6)
    write_trace(trace, tmp_path / "trace")
    hits0, queries0 = prefix_counters(engine.url)
    log = tmp_path / "router.log"
    with SglangRouter([engine.url], "cache_aware", free_port(), log, free_port()) as router:
        r = subprocess.run([sys.executable, "-m", "servetwin.cli", "live", "run", "--trace", str(tmp_path / "trace"),
                            "--endpoint", router.url, "--engine-label", "routed", "--model", "tiny-llama",
                            "--out", str(tmp_path / "run"), "--warmup", "1", "--text-prompts", str(model_dir),
                            "--request-id-prefix", "t6"], capture_output=True, text=True, cwd=ROOT, timeout=600)
        hits_mid = prefix_counters(engine.url)
        # what text prompts and the router add on an idle engine: three ways, each from an emptied cache
        import numpy as np

        from live.route_latency import measure
        from live.text_prompts import TextPrompts
        path = measure(trace, TextPrompts(trace, str(model_dir)), [engine.url], router.url, "tiny-llama", n=3)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert {k: len(v) for k, v in path.ttft_s.items()} == {"ids": 3, "text": 3, "routed": 3}
    assert all(0 < t < 60 for v in path.ttft_s.values() for t in v)
    paired = np.asarray(path.ttft_s["routed"]) - np.asarray(path.ttft_s["text"])
    assert path.router_s == pytest.approx(float(np.median(paired)))
    assert json.loads(json.dumps(path.summary()))["requests_per_way"]["routed"] == 3
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    rows = [x for x in rows if not x["warmup"]]
    assert rows and all(x["ok"] for x in rows)
    assert all(x["server_prompt_tokens"] == x["prompt_tokens"] for x in rows)
    where = worker_of(log, "t6")
    assert set(where) == {x["request_id"] for x in rows} and set(where.values()) == {engine.url}
    hits1, queries1 = hits_mid
    assert queries1 - queries0 >= sum(x["prompt_tokens"] for x in rows)
