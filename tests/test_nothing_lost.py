"""Nothing lost, nothing leaked: outputs never destroy what the user had, traces and records are sealed, bad
input gets one line (exit 2, no traceback, no partial output), secrets never reach a record or a report."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from servetwin.cli import main

ROOT = Path(__file__).parent.parent
SMALL = ROOT / "scenarios" / "examples" / "cpu-small.yaml"
CPU = ("--hardware", "cpu-base", "--model", "tiny-llama")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> bool:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return len(lines) == 1 and "Traceback" not in err and "internal error" not in err


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("trace") / "t"
    assert main(["trace", "compile", "--scenario", str(SMALL), "--set", "duration_s=30", "--out", str(d)]) == 0
    return d


@pytest.fixture(scope="module")
def run_dir(trace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("run") / "r"
    assert main(["simulate", "--trace", str(trace), "--engine", "vllm-0.6.3", *CPU, "--out", str(d)]) == 0
    return d


def _copy(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


# --- outputs never destroy data ----------------------------------------------------------------------------
def test_out_that_holds_user_files_is_refused_and_kept(trace: Path, tmp_path: Path, capsys):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("x")
    rc, _, err = run(capsys, "simulate", "--trace", trace, "--engine", "vllm-0.6.3", *CPU, "--out", keep)
    assert rc == 2 and one_line(err) and "did not write" in err
    assert (keep / "notes.txt").read_text() == "x" and sorted(p.name for p in keep.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("where", ["same", "inside"])
def test_out_equal_to_or_inside_the_input_is_refused(trace: Path, tmp_path: Path, capsys, where: str):
    t = _copy(trace, tmp_path / "t")
    before = {p.name: p.read_bytes() for p in t.iterdir()}
    out = t if where == "same" else t / "run"
    rc, _, err = run(capsys, "simulate", "--trace", t, "--engine", "vllm-0.6.3", *CPU, "--out", out)
    assert rc == 2 and one_line(err) and "input" in err
    assert {p.name: p.read_bytes() for p in t.iterdir()} == before


def test_a_run_of_the_same_kind_is_replaced_and_reads_back(trace: Path, run_dir: Path, tmp_path: Path, capsys):
    out = _copy(run_dir, tmp_path / "r")
    rc, _, _ = run(capsys, "simulate", "--trace", trace, "--engine", "sglang-0.4.1", *CPU, "--out", out)
    assert rc == 0 and json.loads((out / "run.json").read_text())["engine"] == "sglang-0.4.1"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]      # no temporary sibling left
    mode = stat.S_IMODE(out.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o777 & ~umask                                             # not mkdtemp's 0700


def test_a_trace_is_not_replaced_by_a_run_or_figures(trace: Path, tmp_path: Path, capsys):
    t = _copy(trace, tmp_path / "t")
    rc, _, err = run(capsys, "trace", "compile", "--scenario", SMALL, "--out", t)     # same kind: replaced
    assert rc == 0
    rc, _, err = run(capsys, "figures", t, "--out", t)
    assert rc == 2 and one_line(err)
    assert (t / "manifest.json").is_file()


def test_killed_writer_leaves_no_output_and_the_next_write_cleans_up(trace: Path, tmp_path: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch):
    import pyarrow.parquet as pq

    def boom(*a, **k):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt
    monkeypatch.setattr(pq, "write_table", boom)           # every table of a record is written through it
    out = tmp_path / "r"
    assert main(["simulate", "--trace", str(trace), "--engine", "vllm-0.6.3", *CPU, "--out", str(out)]) == 130
    monkeypatch.undo()
    assert not out.exists() and not list(tmp_path.iterdir())
    capsys.readouterr()


def test_interrupted_compile_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    import scenarios.trace as tr
    real = tr.npy_bytes
    calls = {"n": 0}

    def cut(arr):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return real(arr)
    monkeypatch.setattr(tr, "npy_bytes", cut)
    rc, _, _ = run(capsys, "trace", "compile", "--scenario", SMALL, "--out", tmp_path / "t")
    assert rc == 130 and not list(tmp_path.iterdir())


# --- sealed traces -------------------------------------------------------------------------------------------
def _edit_manifest(trace: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    t = _copy(trace, tmp_path / "t")
    m = json.loads((t / "manifest.json").read_text())
    m = edit(m)
    (t / "manifest.json").write_text(json.dumps(m))
    return t


def _set(path: str, value):  # type: ignore[no-untyped-def]
    def edit(m):  # type: ignore[no-untyped-def]
        node = m
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
        return m
    return edit


def _drop(key: str):  # type: ignore[no-untyped-def]
    return lambda m: {k: v for k, v in m.items() if k != key}


MANIFEST_EDITS = {
    "seed": (_set("seed", 7), "digest"),
    "counts": (_set("counts.requests", 5), "digest"),
    "duration": (_set("scenario.duration_s", 1e6), "digest"),
    "offered load": (_set("offered_load_rps", 9.0), "digest"),
    "prompt layout": (_set("prompt_layout.prefix_tokens", 1), "digest"),
    "achieved sharing": (_set("achieved_sharing", 0.5), "digest"),
    "no tool_delay_max_s": (_drop("tool_delay_max_s"), "tool_delay_max_s"),
    "no target_sharing": (_drop("target_sharing"), "target_sharing"),
    "a list": (lambda m: [m], "JSON object"),
    "seed 'abc'": (_set("seed", "abc"), "seed"),
}


@pytest.mark.parametrize("case", list(MANIFEST_EDITS))
def test_an_edited_manifest_is_refused_by_validate_and_simulate(trace: Path, tmp_path: Path, capsys, case: str):
    edit, words = MANIFEST_EDITS[case]
    t = _edit_manifest(trace, tmp_path, edit)
    rc, _, err = run(capsys, "trace", "validate", t)
    assert rc == 1 and one_line(err) and words in err
    rc, _, err = run(capsys, "simulate", "--trace", t, "--engine", "vllm-0.6.3", *CPU, "--out", tmp_path / "r")
    assert rc == 1 and one_line(err) and not (tmp_path / "r").exists()


# --- sealed records ------------------------------------------------------------------------------------------
def _flip(path: Path, at: int) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x04
    path.write_bytes(bytes(b))


RECORD_DAMAGE = {
    "flipped bit in requests.parquet": lambda r: _flip(r / "requests.parquet", len((r / "requests.parquet")
                                                                                 .read_bytes()) // 2),
    "truncated requests.parquet": lambda r: (r / "requests.parquet").write_bytes(
        (r / "requests.parquet").read_bytes()[:100]),
    "zero-byte requests.parquet": lambda r: (r / "requests.parquet").write_bytes(b""),
    "missing telemetry": lambda r: (r / "telemetry.parquet").unlink(),
    "edited engine_config": lambda r: _rewrite(r, lambda m: m["engine_config"].update(block_size=1)),
    "edited duration": lambda r: _rewrite(r, lambda m: m["run_window"].update(duration_s=1.0)),
    "wrong type": lambda r: _rewrite(r, lambda m: m.update(seed="one")),
    "not an object": lambda r: (r / "run.json").write_text("[1, 2]"),
    "binary run.json": lambda r: (r / "run.json").write_bytes(b"\xff\xfe\x00\x01"),
}


def _rewrite(r: Path, change) -> None:  # type: ignore[no-untyped-def]
    m = json.loads((r / "run.json").read_text())
    change(m)
    (r / "run.json").write_text(json.dumps(m))


@pytest.mark.parametrize("case", list(RECORD_DAMAGE))
@pytest.mark.parametrize("command", ["analyze", "figures", "report"])
def test_a_damaged_record_is_refused(run_dir: Path, tmp_path: Path, capsys, case: str, command: str):
    r = _copy(run_dir, tmp_path / "r")
    RECORD_DAMAGE[case](r)
    extra = [] if command == "analyze" else ["--out", tmp_path / ("o.html" if command == "report" else "o")]
    rc, out, err = run(capsys, command, r, *extra)
    assert rc == 2 and one_line(err), err
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.html").exists()


# --- secrets ---------------------------------------------------------------------------------------------------
SGLANG_LOG = ("[2026-12-05 10:00:00] server_args=ServerArgs(model_path='/m/tiny-llama', tokenizer_path='/m/tiny', "
              "api_key='sk-sglang-0123456789abcdef', admin_api_key='adm1n-secret', chunked_prefill_size=4096, "
              "schedule_policy='lpm', hf_token='hf_abcdefghijklmnop', mem_fraction_static=0.716)\n"
              "[2026-12-05 10:00:05] max_total_num_tokens=65536, chunked_prefill_size=4096, max_prefill_tokens=16384, "
              "max_running_requests=4096, context_len=8192\n")
VLLM_LOG = ("INFO 12-05 10:00:00 [utils.py:233] non-default args: {'model': '/m/tiny-llama', 'api_key': "
            "['sk-vllm-0123456789abcdef'], 'enable_prefix_caching': True, 'block_size': 32}\n"
            "INFO 12-05 10:00:09 [kv_cache_utils.py:1087] GPU KV cache size: 32,768 tokens\n")
SECRETS = ("sk-sglang-0123456789abcdef", "adm1n-secret", "hf_abcdefghijklmnop", "sk-vllm-0123456789abcdef",
           "hunter2")


@pytest.mark.parametrize("log", [SGLANG_LOG, VLLM_LOG], ids=["sglang", "vllm"])
def test_engine_secrets_never_reach_run_json_or_the_report(run_dir: Path, tmp_path: Path, capsys, log: str):
    from analysis.records import read_run, write_run
    from live import config_capture as cc
    rec = read_run(run_dir)
    info = {"api_key": "hunter2", "model_path": "/m", "launch": ["python", "-m", "sglang", "--api-key", "hunter2"]}
    rec.meta["engine_config"] = cc.resolved(cc.parse_log(log), {}, info)
    rec.meta["endpoint"] = "http://user:hunter2@127.0.0.1:30000"
    write_run(rec, tmp_path / "r")
    assert main(["report", str(tmp_path / "r"), "--out", str(tmp_path / "report.html")]) == 0
    capsys.readouterr()
    for f in (tmp_path / "r" / "run.json", tmp_path / "report.html"):
        text = f.read_text()
        assert not [s for s in SECRETS if s in text], f
    cfg = read_run(tmp_path / "r").meta["engine_config"]
    assert "<redacted>" in json.dumps(cfg) and str(cfg.get("model_path")).startswith("/m")   # the rest is kept


def test_an_error_never_prints_a_secret(capsys):
    rc, _, err = run(capsys, "live", "run", "--scenario", SMALL, "--endpoint", "http://user:hunter2@127.0.0.1:9",
                     "--engine-label", "x", "--out", "/nonexistent-dir/x", "--timeout", "1")
    assert rc != 0 and "hunter2" not in err and one_line(err)


# --- up-front limits and failing runs --------------------------------------------------------------------------
def test_a_configuration_whose_kv_cannot_hold_one_request_is_refused_at_start(trace: Path, tmp_path: Path, capsys):
    for over in (["--set", "num_gpu_blocks=1"], ["--context", "-5"]):
        rc, _, err = run(capsys, "simulate", "--trace", trace, "--engine", "vllm-0.6.3", *CPU, *over,
                         "--out", tmp_path / "r")
        assert rc == 2 and one_line(err) and not (tmp_path / "r").exists()
    rc, _, err = run(capsys, "simulate", "--trace", trace, "--engine", "sglang-0.4.1", *CPU,
                     "--set", "max_total_tokens=1000", "--out", tmp_path / "r")
    assert rc == 2 and one_line(err) and "max_total_tokens" in err


def test_a_run_in_which_most_requests_fail_exits_1_naming_the_errors(trace: Path, tmp_path: Path, capsys):
    rc, out, err = run(capsys, "simulate", "--trace", trace, "--engine", "vllm-0.6.3", "--hardware", "cpu-base",
                       "--model", "tiny-llama", "--timeout", "0.001", "--out", tmp_path / "r")
    assert rc == 1 and "timeout" in err and "kept" in err and (tmp_path / "r" / "run.json").is_file()


def test_a_one_dag_trace_says_nothing_was_measured(tmp_path: Path, capsys):
    sc = tmp_path / "one.yaml"
    sc.write_text(SMALL.read_text().replace("{kind: gamma, rate: 0.5, cv: 1.5}", "{kind: replay, times: [1.0]}"))
    rc, out, _ = run(capsys, "simulate", "--scenario", sc, "--engine", "vllm-0.6.3", *CPU, "--out", tmp_path / "r1")
    assert rc == 1 and "no measured requests" in out and "keeps pace" not in out


@pytest.mark.parametrize("setting", ["duration_s=1e9", "arrivals.rate=1e6"])
def test_an_oversized_scenario_is_refused_before_allocating(tmp_path: Path, capsys, setting: str):
    rc, _, err = run(capsys, "trace", "compile", "--scenario", SMALL, "--set", setting, "--out", tmp_path / "t")
    assert rc == 2 and one_line(err) and "SERVETWIN_MAX_REQUESTS" in err and not (tmp_path / "t").exists()


# --- every bad input: one line, exit 2 ----------------------------------------------------------------------------
def _file(tmp: Path, name: str, data: bytes) -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p


def _bad_inputs(tmp: Path, trace: Path, run_dir: Path) -> dict[str, list[str | Path]]:
    sc = SMALL.read_text()
    hw = (ROOT / "simulator" / "profiles" / "hardware" / "cpu-base.yaml").read_text()
    empty = tmp / "empty"
    empty.mkdir()
    file_out = _file(tmp, "file-out", b"x")
    sim = ["simulate", "--trace", trace, "--engine", "vllm-0.6.3"]
    return {
        "infinite rate": ["trace", "compile", "--scenario", _file(tmp, "inf.yaml", sc.replace("rate: 0.5",
                                                                                          "rate: .inf").encode()),
                          "--out", tmp / "o"],
        "binary scenario": ["trace", "compile", "--scenario", _file(tmp, "bin.yaml", b"\x89PNG\xff\xfe\x00"),
                            "--out", tmp / "o"],
        "duplicate key": ["trace", "compile", "--scenario", _file(tmp, "dup.yaml", (sc + "seed: 2\n").encode()),
                          "--out", tmp / "o"],
        "length 3 sharing 0.5": ["trace", "compile", "--scenario", SMALL, "--set", "prompts.length=3",
                                 "prompts.sharing=0.5", "--out", tmp / "o"],
        "binary hardware": [*sim, "--hardware", _file(tmp, "hw.yaml", b"\xff\xfe\x00\x01"), "--out", tmp / "o"],
        "hardware bad syntax": [*sim, "--hardware", _file(tmp, "hw2.yaml", (hw + "\n  : [unclosed\n").encode()),
                                "--out", tmp / "o"],
        "out is a file": [*sim, *CPU, "--out", file_out],
        "out below a file": [*sim, *CPU, "--out", file_out / "sub"],
        "analyze empty": ["analyze", empty],
        "figures empty": ["figures", empty, "--out", tmp / "o"],
        "report empty": ["report", empty, "--out", tmp / "o.html"],
        "report over a user file": ["report", run_dir, "--out", file_out],
        "sweep into a trace": ["sweep", ROOT / "scenarios" / "grids" / "headline.yaml", "--out", trace],
        "fit over a user file": ["calibrate", "fit", run_dir, "--out", file_out],
    }


def test_every_bad_input_gets_one_line_and_exit_2(trace: Path, run_dir: Path, tmp_path: Path, capsys):
    for name, args in _bad_inputs(tmp_path, trace, run_dir).items():
        rc, out, err = run(capsys, *args)
        assert rc == 2 and one_line(err), f"{name}: rc {rc}: {err}"
        assert not (tmp_path / "o").exists() and not (tmp_path / "o.html").exists(), name
        assert (tmp_path / "file-out").read_bytes() == b"x", name
