"""The ``servetwin`` command: thin argument parsing; each sub-command calls one public function."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from foundation.errors import ServetwinError


def _add_engine_args(p: argparse.ArgumentParser, engine_required: bool = True) -> None:
    p.add_argument("--engine", required=engine_required, help="preset: vllm-0.6.3, vllm-v1, sglang-0.4.1, "
                   "sglang-current")
    p.add_argument("--set", nargs="*", default=[], metavar="K=V", help="engine overrides, e.g. "
                   "enable_chunked_prefill=true max_num_batched_tokens=2048")
    p.add_argument("--hardware", default="l4", help="hardware profile name or YAML path (default l4)")
    p.add_argument("--model", default="llama-3.1-8b", help="model profile name or YAML path")
    p.add_argument("--context", type=int, default=16384, help="context length (default 16384)")


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", type=int, default=1, help="replicas behind a router (default 1: one engine); "
                   "--engine A,B,… gives each replica its own preset")
    p.add_argument("--router", help="round_robin (default), random, least_outstanding, session, cache_aware "
                   "(sglang-router's), scored (llm-d's weighted scorers)")
    p.add_argument("--router-set", nargs="*", default=[], metavar="K=V", help="router settings by the router's "
                   "own names, e.g. cache_threshold=0.5 balance_abs_threshold=32 latency_s=0.002")


def _realtime_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--realtime-client", action="store_true",
                   help="run the client's event loop at real-time priority (SCHED_FIFO; root or CAP_SYS_NICE) "
                        "so that an engine sharing its CPUs cannot delay its timestamps")


def build_parser() -> argparse.ArgumentParser:
    from servetwin import commands as c
    ap = argparse.ArgumentParser(prog="servetwin", description="Simulate LLM serving engines and validate "
                                 "them live on the same seeded agent traces.")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("paper", help="the default job: the reference study's headline grid (both engines, "
                       "both arms) on the L4 profile; prints the decomposition table")
    p.add_argument("--quick", action="store_true", help="shorter runs, one seed per condition less")
    p.add_argument("--out", default="servetwin-out")
    p.add_argument("--jobs", type=int, default=0)
    p.set_defaults(fn=c.cmd_paper)

    _trace_commands(sub, c)
    _simulation_commands(sub, c)
    _analysis_commands(sub, c)
    _live_commands(sub, c)
    _calibrate_commands(sub, c)
    _study_commands(sub, c)
    return ap


def _trace_commands(sub: Any, c: Any) -> None:
    """trace: compile, import, validate, show"""
    tr = sub.add_parser("trace", help="compile, validate or show a seeded trace")
    tsub = tr.add_subparsers(dest="trace_cmd", metavar="ACTION")
    tsub.required = True
    p = tsub.add_parser("compile", help="scenario YAML + seed → trace directory")
    p.add_argument("--scenario", required=True)
    p.add_argument("--seed", type=int)
    p.add_argument("--set", nargs="*", default=[], metavar="PATH=V", help="scenario overrides, e.g. "
                   "arrivals.rate=0.2 prompts.sharing=0.6")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=c.cmd_trace_compile)
    p = tsub.add_parser("import", help="a production trace file (Mooncake, Qwen-Bailian, Azure, BurstGPT, "
                        "agent sessions, ShareGPT) → trace directory, its prefix reuse and sessions kept")
    p.add_argument("file")
    p.add_argument("--format", required=True, metavar="FMT",
                   help="mooncake, bailian, azure, burstgpt, agent-sessions or sharegpt")
    p.add_argument("--out", required=True)
    p.add_argument("--window", metavar="START:END", help="keep requests arriving START..END s after the first")
    p.add_argument("--rate-scale", type=float, default=1.0, help="arrivals X times faster (times divided by X)")
    p.add_argument("--sample", type=int, metavar="N", help="keep N requests (N sessions) chosen with --seed")
    p.add_argument("--seed", type=int, default=0, help="token content and sampling (default 0)")
    p.add_argument("--vocab-high", type=int, default=128000, help="token ids drawn below V (default 128000)")
    p.add_argument("--vocab-low", type=int, default=0, help="token ids drawn from L up, above the tokenizer's "
                   "special ids (default 0)")
    p.add_argument("--max-len", type=int, metavar="N", help="drop requests whose prompt + output exceed N tokens "
                   "(an engine's context)")
    p.add_argument("--rate", type=float, help="sharegpt: conversations per second (Poisson, seeded)")
    p.add_argument("--tokenizer", metavar="DIR", help="sharegpt: the model's tokenizer directory (tokenizer.json)")
    p.add_argument("--max-turns", type=int, default=1, help="sharegpt: turns per conversation (default 1: "
                   "vllm bench serve's selection)")
    p.set_defaults(fn=c.cmd_trace_import)
    p = tsub.add_parser("validate", help="run every validator check; exit 1 naming the failed check")
    p.add_argument("trace")
    p.set_defaults(fn=c.cmd_trace_validate)
    p = tsub.add_parser("show", help="counts, achieved σ, offered load, role ratios, prefix digest")
    p.add_argument("trace")
    p.add_argument("--figure", metavar="PNG", help="also draw requests per minute and lengths over time")
    p.set_defaults(fn=c.cmd_trace_show)


def _simulation_commands(sub: Any, c: Any) -> None:
    """simulate, serve, sweep, capacity"""
    p = sub.add_parser("simulate", help="simulate one engine configuration on a trace → RunRecord")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--scenario")
    g.add_argument("--trace")
    p.add_argument("--seed", type=int)
    _add_engine_args(p)
    p.add_argument("--out", required=True)
    p.add_argument("--chunks", action="store_true", help="record every token's emission time")
    p.add_argument("--timeout", type=float, default=300.0, help="client request timeout, s")
    p.add_argument("--no-fast-forward", dest="fast_forward", action="store_false",
                   help="advance every engine step as its own event (the reference mode; by default runs of pure "
                        "decode steps nothing can change are advanced at once, with the same results)")
    _add_cluster_args(p)
    p.set_defaults(fn=c.cmd_simulate)

    p = sub.add_parser("serve", help="the simulated engine as an OpenAI-compatible server: completions and chat "
                       "(streamed or not), /v1/models, /health, /metrics in the engine's own names")
    _add_engine_args(p)
    _add_cluster_args(p)
    p.add_argument("--speedup", type=float, default=1.0, help="simulated seconds per wall second (default 1: the "
                   "latency a real engine would show; 10 serves ten times faster)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tokenizer", metavar="DIR", help="the model's tokenizer: text prompts counted as the engine "
                   "counts them (default: ~4 characters per token)")
    p.add_argument("--served-model-name", help="the model id clients name (default: the model profile's name)")
    p.add_argument("--default-max-tokens", type=int, default=16, help="max_tokens where a request gives none "
                   "(default 16, as vLLM's completions)")
    p.add_argument("--record", metavar="DIR", help="on exit, write what was served: DIR/run (a RunRecord in the "
                   "twin's time) and DIR/trace (replayable with simulate --trace)")
    p.set_defaults(fn=c.cmd_serve)

    p = sub.add_parser("sweep", help="run every cell of a grid (resumable)")
    p.add_argument("grid")
    p.add_argument("--out", required=True)
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--address", default=None, help="Ray cluster address")
    p.add_argument("--jobs", type=int, default=0, help="local worker processes (default: all cores)")
    p.add_argument("--quick", action="store_true", help="scale durations down for a fast look")
    p.set_defaults(fn=c.cmd_sweep)

    p = sub.add_parser("capacity", help="largest offered load a configuration keeps pace with (bisection)")
    p.add_argument("--scenario", required=True)
    _add_engine_args(p)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--lo", type=float, default=0.02, help="lowest DAG rate to try")
    p.add_argument("--hi", type=float, default=1.0, help="highest DAG rate to try first")
    p.add_argument("--max-rate", type=float, default=float("inf"),
                   help="the most it sustains is searched at DAG rates up to this (e.g. 0.4, the top of the study's "
                        "rate sweep; default: until X stops rising)")
    p.add_argument("--pace", choices=["nominal", "realised"], default="nominal",
                   help="keeps pace against the nominal offered load, as the study defines it (default), or against "
                        "each run's realised load")
    p.add_argument("--slo", nargs="+", metavar="METRIC=S", help="fleet sizing instead: the fewest replicas that keep "
                   "pace at --rate and meet every objective (ttft_p50, ttft_p95, tpot_p50, e2e_p50; seconds, "
                   "geometric mean over the seeds), per router")
    p.add_argument("--rate", type=float, help="with --slo: the DAG rate to serve (default: the scenario's)")
    p.add_argument("--routers", default="round_robin,least_outstanding,cache_aware",
                   help="with --slo: routers to size for, comma-separated")
    p.add_argument("--router-set", nargs="*", default=[], metavar="K=V", help="with --slo: router settings")
    p.add_argument("--max-replicas", type=int, default=64, help="with --slo: the largest fleet tried")
    p.set_defaults(fn=c.cmd_capacity)


def _analysis_commands(sub: Any, c: Any) -> None:
    """analyze, engines, cost, cluster-study, figures"""
    p = sub.add_parser("analyze", help="the study's tables from runs")
    p.add_argument("runs", nargs="+")
    p.add_argument("--format", choices=["md", "csv", "json"], default="md")
    p.set_defaults(fn=c.cmd_analyze)

    p = sub.add_parser("engines", help="print resolved engine configurations (as the start-up log would)")
    _add_engine_args(p, engine_required=False)
    p.set_defaults(fn=c.cmd_engines)

    p = sub.add_parser("cost", help="predicted step time and its breakdown")
    p.add_argument("--hardware", default="l4")
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--family", default="vllm-v0", choices=["vllm-v0", "vllm-v1", "sglang"])
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--prefill", nargs="*", default=[], metavar="N[@CTX]", help="prefill chunks")
    p.add_argument("--decode", nargs="*", default=[], metavar="BxCTX", help="decode groups, e.g. 16x2048")
    p.add_argument("--attention-backend", default=None, metavar="NAME",
                   help="the engine's resolved attention backend: torch_native (SGLang on a CPU) attends a "
                        "prefill chunk over its whole sequence, as the simulator does for runs that resolved it")
    p.set_defaults(fn=c.cmd_cost)

    p = sub.add_parser("cluster-study", help="two real vLLM CPU instances behind sglang-router (cache_aware, "
                       "round_robin) and their simulated twins on one trace (make engine router)")
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="a 40-s trace instead of 120 s")
    p.set_defaults(fn=c.cmd_cluster_study)

    p = sub.add_parser("figures", help="the study's headline figures from runs (simulated, live or both)")
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=c.cmd_figures)


def _live_commands(sub: Any, c: Any) -> None:
    """live run, live campaign"""
    lv = sub.add_parser("live", help="drive a real OpenAI-compatible engine with a trace")
    lsub = lv.add_subparsers(dest="live_cmd", metavar="ACTION")
    lsub.required = True
    p = lsub.add_parser("run", help="replay a trace against an endpoint → RunRecord")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--scenario")
    g.add_argument("--trace")
    p.add_argument("--seed", type=int)
    p.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--engine-label", required=True, help="name of the configuration under test")
    p.add_argument("--model", default=None, help="served model name (default: the endpoint's first model)")
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--metrics-interval", type=float, default=1.0)
    p.add_argument("--prometheus", default=None, help="Prometheus base URL for the run window")
    p.add_argument("--engine-log", default=None, help="engine start-up log to read the resolved configuration")
    p.add_argument("--engine-pid", type=int, default=None, metavar="PID",
                   help="a local engine's process: record its processes' CPU time and waits for a CPU in run.json")
    p.add_argument("--cold-cache", action="store_true",
                   help="empty the engine's prefix cache after the warm-up, as the simulated twin starts (vLLM: "
                        "/reset_prefix_cache, its server started with VLLM_SERVER_DEV_MODE=1; SGLang: /flush_cache)")
    p.add_argument("--expect", nargs="*", default=[], metavar="K=V", help="resolved settings the run must have")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument("--chat", default=None, metavar="TOKENIZER_DIR",
                   help="use /v1/chat/completions with text prompts of exact token counts (local tokenizer)")
    p.add_argument("--text-prompts", default=None, metavar="TOKENIZER_DIR",
                   help="/v1/completions with text prompts of exact token counts (a router that takes text only, "
                        "such as sglang-router)")
    p.add_argument("--request-id-prefix", default=None, metavar="P",
                   help="send X-Request-Id P-<request index> with every request (a router's log then names each)")
    _realtime_flag(p)
    p.set_defaults(fn=c.cmd_live_run)
    p = lsub.add_parser("campaign", help="run a campaign of live runs one at a time (resumable, with retries)")
    p.add_argument("campaign")
    p.add_argument("--out", required=True)
    _realtime_flag(p)
    p.set_defaults(fn=c.cmd_live_campaign)


def _calibrate_commands(sub: Any, c: Any) -> None:
    """calibrate probe, fit, gpu-probe, decode-scale"""
    cal = sub.add_parser("calibrate", help="probe a real engine and fit the cost model to it")
    csub = cal.add_subparsers(dest="cal_cmd", metavar="ACTION")
    csub.required = True
    p = csub.add_parser("probe", help="black-box probes through the API → a probe RunRecord")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--engine-log", default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, nargs=2, default=[2, 4096], metavar=("LOW", "HIGH"),
                   help="token-id range for probe prompts (exclude special tokens)")
    p.add_argument("--chunking", action="store_true",
                   help="only the shapes a chunk budget changes (a second configuration of an engine already probed)")
    p.add_argument("--realtime-client", action="store_true", default=True, help=argparse.SUPPRESS)
    p.add_argument("--normal-priority", dest="realtime_client", action="store_false",
                   help="keep the client at normal priority (by default it runs at real-time priority where it "
                        "may: root or CAP_SYS_NICE, so that an engine on the same cores cannot delay it)")
    p.set_defaults(fn=c.cmd_calibrate_probe)
    p = csub.add_parser("fit", help="fit the cost model's coefficients to probe records (or gpu-probe directories: "
                        "the hardware's efficiencies) → a profile YAML")
    p.add_argument("probes", nargs="+")
    p.add_argument("--engine", default="vllm-v1", choices=["vllm-v0", "vllm-v1", "sglang"], help="engine family")
    p.add_argument("--model", default=None, help="model profile (default tiny-llama; a gpu-probe's own model)")
    p.add_argument("--base", default=None, help="hardware profile to start from (default cpu-base; h100 for "
                   "gpu-probe directories)")
    p.add_argument("--out", required=True)
    p.add_argument("--accept-poor-fit", action="store_true",
                   help="write a fit that fails the quality gates (R² ≥ 0.98, MAPE ≤ 10 %%, each probe kind's median "
                        "error within 15 %%), marked as such; simulate and compare then print the mark")
    p.set_defaults(fn=c.cmd_calibrate_fit)
    p = csub.add_parser("gpu-probe", help="time the model's step shapes on this machine's GPU (random bf16 weights, "
                        "plain PyTorch) → a gpu-probe directory that calibrate fit reads")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="llama-3.1-8b", help="model profile whose layers are built")
    p.add_argument("--layers", type=int, default=None, help="decoder layers timed, scaled to the model's depth "
                   "(default 4; 2 in a dry run)")
    p.add_argument("--dry-run", action="store_true", help="a tiny grid on the CPU (no GPU needed)")
    p.add_argument("--python", default=None, metavar="PATH", help="an interpreter with PyTorch to run the probe in "
                   "(default: this one)")
    p.set_defaults(fn=c.cmd_calibrate_gpu_probe)
    p = csub.add_parser("decode-scale", help="one engine instance's decode steps under load vs a fitted profile, "
                        "from a live run (a calibration trace) → the profile with its decode_scale")
    p.add_argument("live_run", help="a live run with per-token times, not one of the runs to be compared")
    p.add_argument("--hardware", required=True, help="the fitted profile (name or YAML)")
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--out", required=True, help="profile YAML to write")
    p.add_argument("--statistic", default="mean", choices=["mean", "median"],
                   help="each streaming count's gaps summarised by (default mean: E2E is a sum of gaps)")
    p.add_argument("--accept-poor-fit", action="store_true",
                   help="write the scale even where it fails the quality gates (a poor base profile, streaming counts "
                        "more than 15 %% from the scale), marked as such")
    p.set_defaults(fn=c.cmd_calibrate_decode_scale)


def _study_commands(sub: Any, c: Any) -> None:
    """compare, twin-study (and diagnose), report"""
    p = sub.add_parser("compare", help="simulate every live run's trace with its resolved configuration; "
                       "measured vs simulated side by side")
    p.add_argument("sim_runs", help="directory for the simulated twins")
    p.add_argument("live_runs", nargs="+")
    p.add_argument("--hardware", required=True, help="(fitted) hardware profile name or YAML")
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--format", choices=["md", "csv", "json"], default="md")
    p.add_argument("--figures", default=None, metavar="DIR", help="also draw measured vs simulated per metric")
    p.add_argument("--phi", nargs=2, default=None, metavar=("DEFAULTS_PAIR", "MATCHED_PAIR"),
                   help="decomposition φ measured and simulated, e.g. vllm-nochunk/sglang vllm-c512/sglang-c512")
    p.add_argument("--trace", action="append", metavar="DIR", help="the trace directory a live run replayed "
                   "where it cannot be recompiled (an imported trace); repeat for several")
    p.set_defaults(fn=c.cmd_compare)

    p = sub.add_parser("twin-study", help="the two-engine study on this machine: vLLM and SGLang (CPU) probed, "
                       "calibrated and driven live with the same traces, then simulated; targets and tables side "
                       "by side (make engine engine-sglang first)")
    from calibrate.twin.args import add_arguments as twin_study_arguments
    twin_study_arguments(p)
    p.set_defaults(fn=c.cmd_twin_study)
    from calibrate.twin.diagnose import DIAGNOSES
    dsub = p.add_subparsers(dest="twin_cmd", metavar="diagnose")
    d = dsub.add_parser("diagnose", help="one of the study's investigations: " + "; ".join(
        f"{k} ({v[1]})" for k, v in DIAGNOSES.items()))
    d.add_argument("name", choices=list(DIAGNOSES), metavar="NAME", help=", ".join(DIAGNOSES))
    d.add_argument("args", nargs=argparse.REMAINDER, help="its own arguments (NAME --help lists them)")
    d.set_defaults(fn=c.cmd_twin_diagnose)

    p = sub.add_parser("report", help="one self-contained HTML page: tables, figures, resolved configurations")
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="servetwin report")
    p.set_defaults(fn=c.cmd_report)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    fn: Callable[[argparse.Namespace], int] = args.fn
    try:
        return int(fn(args) or 0)
    except ServetwinError as err:
        print(f"servetwin: error: {_one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("servetwin: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                     # output piped into head & co.
        sys.stderr.close()
        return 0
    except Exception as err:  # one line, never a traceback (SERVETWIN_DEBUG=1 shows it)
        if os.environ.get("SERVETWIN_DEBUG"):
            raise
        print(f"servetwin: internal error: {type(err).__name__}: {_one_line(str(err))}", file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    """An error as one line, with any secret it quotes (a key, a URL's credentials) redacted."""
    from analysis.redact import redact_text
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")    # a lone surrogate from the input
    return redact_text(" ".join(text.split()))


if __name__ == "__main__":
    sys.exit(main())
