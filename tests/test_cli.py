"""The command line: every documented sub-command end to end, and one-line errors with exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
EX = ROOT / "scenarios" / "examples" / "rate-0.12.yaml"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servetwin.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT)


def test_help_lists_subcommands():
    out = cli("--help").stdout
    for c in ("paper", "trace", "simulate", "sweep", "live", "calibrate", "compare", "analyze", "figures",
              "engines", "cost"):
        assert c in out


def test_reference_condition_compiles_validates_and_shows(tmp_path: Path):
    d = tmp_path / "t"
    r = cli("trace", "compile", "--scenario", str(EX), "--out", str(d))
    assert r.returncode == 0, r.stderr
    assert cli("trace", "validate", str(d)).returncode == 0
    show = cli("trace", "show", str(d)).stdout
    assert "achieved 0.8999" in show and "1:4:1" in show and "offered 0.7200" in show


def test_tampered_trace_exits_1_naming_the_check(tmp_path: Path):
    d = tmp_path / "t"
    cli("trace", "compile", "--scenario", str(EX), "--set", "duration_s=60", "--out", str(d))
    b = bytearray((d / "prefix.npy").read_bytes())
    b[-1] ^= 1
    (d / "prefix.npy").write_bytes(bytes(b))
    r = cli("trace", "validate", str(d))
    assert r.returncode == 1 and "digest" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # a path that is not there is bad input (exit 2), not a trace that failed a check
    sim = ("simulate", "--out", str(tmp_path / "r"), "--engine", "vllm-0.6.3", "--trace")
    for args in (("trace", "validate"), ("trace", "show"), sim):
        r = cli(*args, str(tmp_path / "absent"))
        assert r.returncode == 2 and "no such trace directory" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("content, needle", [
    ("arrivals: {rate: -0.5}\n", "arrivals.rate"),
    ("prompts: {length: 100, sharing: 1.5}\n", "prompts.sharing"),
    ("prompts: {length: 100, sharing: 0.5, suffix_tokens: 3}\n", "prompts"),
    ("nonsense_key: 3\n", "unknown key"),
    ("arrivals: [unclosed\n", "invalid YAML"),
])
def test_bad_scenarios_exit_2_with_one_line(tmp_path: Path, content, needle):
    f = tmp_path / "s.yaml"
    f.write_text(content)
    r = cli("trace", "compile", "--scenario", str(f), "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, needle", [
    (["--lo", "0"], "--lo 0"), (["--lo", "0.3", "--hi", "0.2"], "--lo below --hi"),
    (["--max-rate", "-1"], "--max-rate"),
    (["--seeds", "1", "--lo", "4", "--hi", "5"], "lower --lo"),
    (["--scenario", str(Path(__file__).parent / "nope.yaml")], "nope.yaml"),
])
def test_bad_capacity_searches_exit_2_with_one_line(args, needle):
    r = cli("capacity", "--scenario", str(EX), "--engine", "vllm-0.6.3", *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_simulate_analyze_engines_cost(tmp_path: Path):
    out = tmp_path / "runs"
    for eng, sets in (("vllm-0.6.3", ["enable_prefix_caching=true"]), ("sglang-0.4.1", [])):
        r = cli("simulate", "--scenario", str(EX), "--seed", "2", "--engine", eng, "--set", *sets,
                "--out", str(out / eng), *([] if sets else []))
        assert r.returncode == 0, r.stderr
        assert "TTFT p50" in r.stdout
    r = cli("analyze", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    tables = json.loads(r.stdout)
    assert {"absolute", "gaps", "decomposition", "dispersion"} <= set(tables)
    assert len(tables["absolute"]) == 2
    r = cli("engines", "--hardware", "l4", "--context", "16384")
    assert "sglang-0.4.1" in r.stdout and "chunked_prefill_size=2048" in r.stdout and "cuda_graph_max_bs=8" in r.stdout
    assert "max_num_batched_tokens=16384" in r.stdout and "enable_chunked_prefill=False" in r.stdout
    r = cli("engines", "--engine", "vllm-0.6.3", "--set", "gpu_memory_utilization=0.88")
    assert r.returncode == 0 and "gpu_memory_utilization=0.88" in r.stdout and "num_gpu_blocks=1291" in r.stdout
    r = cli("engines", "--set", "gpu_memory_utilization=0.88")          # which preset's knob? one line, exit 2
    assert r.returncode == 2 and "--set needs --engine" in r.stderr and r.stderr.count("\n") == 1
    r = cli("cost", "--prefill", "4096", "--decode", "16x2048")
    assert r.returncode == 0 and "compute" in r.stdout and "overhead" in r.stdout


def test_simulate_writes_and_summarises_a_run_without_pandas_or_scipy(tmp_path: Path):
    """The simulate path keeps its tables as columns and writes them through pyarrow's buffers, so the command
    starts and finishes without importing pandas or scipy (issue: start-up); its record reads back as any other."""
    scen = tmp_path / "s.yaml"
    scen.write_text("duration_s: 40\narrivals: {rate: 0.5}\nprompts: {length: 512, sharing: 0.5}\n")
    assert cli("trace", "compile", "--scenario", str(scen), "--out", str(tmp_path / "t")).returncode == 0
    code = ("import sys\nfrom servetwin.cli import main\n"
            f"rc = main(['simulate', '--trace', {str(tmp_path / 't')!r}, '--engine', 'sglang-0.4.1', "
            f"'--out', {str(tmp_path / 'r')!r}])\n"
            "print(rc, sorted(m for m in ('pandas', 'scipy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] in ("0 []", "1 []"), r.stdout
    from analysis.metrics import run_metrics
    from analysis.records import _coerce_requests, read_run
    from scenarios.trace import read_trace
    from simulator import simulate
    back = read_run(tmp_path / "r")
    again = simulate(read_trace(tmp_path / "t"), "sglang-0.4.1")
    assert back.requests.equals(_coerce_requests(again.requests))
    assert json.dumps(run_metrics(back), sort_keys=True) == json.dumps(run_metrics(again), sort_keys=True)


def test_cost_of_a_cached_prefill_on_a_whole_sequence_backend():
    """SGLang's torch_native backend attends a 205-token chunk on a 1,843-token cached prefix as if all
    2,048 were new: the step the simulator charges (and `servetwin cost` must print) is longer."""
    def step_ms(*extra: str) -> float:
        r = cli("cost", "--hardware", "cpu-base", "--model", "tiny-llama", "--family", "sglang",
                "--prefill", "205@1843", *extra)
        assert r.returncode == 0, r.stderr
        return float(r.stdout.split()[1])
    part, whole = step_ms(), step_ms("--attention-backend", "torch_native")
    assert whole > part * 1.2
    assert step_ms("--attention-backend", "triton") == part


def test_bad_override_names_accepted_keys(tmp_path: Path):
    r = cli("simulate", "--scenario", str(EX), "--engine", "vllm-0.6.3", "--set", "chunky=1", "--out",
            str(tmp_path / "x"))
    assert r.returncode == 2 and "chunky" in r.stderr and "accepted keys" in r.stderr
    r = cli("simulate", "--scenario", str(EX), "--engine", "vllm-9", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "known:" in r.stderr


def test_report_builds_one_page(tmp_path: Path):
    runs = tmp_path / "runs"
    for eng in ("vllm-0.6.3", "sglang-0.4.1"):
        cli("simulate", "--scenario", str(EX), "--engine", eng, "--out", str(runs / eng))
    r = cli("report", str(runs), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert "<h2>absolute</h2>" in page and "data:image/png;base64," in page and "engine_config" in page


def test_an_error_quoting_a_lone_surrogate_is_still_one_printable_line():
    from servetwin.cli import _one_line
    line = _one_line("in.yaml: '\ud800' must be {value: …}")
    assert line.encode("utf-8") and "\\ud800" in line and "\n" not in line
