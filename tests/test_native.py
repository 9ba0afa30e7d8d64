"""The compiled hot modules (simulator/native.py): used only while built from the current sources, and the same bytes
as the sources give, for every preset and a cluster."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import native

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = {"seed": 3, "duration_s": 120, "arrivals": {"rate": 0.2},
            "prompts": {"length": 1024, "sharing": 0.6, "prefix_groups": 2}}
RUNS = {"vllm-0.6.3": ["--set", "enable_prefix_caching=true"], "vllm-v1": [], "sglang-0.4.1": [],
        "sglang-current": [], "cluster": ["--replicas", "3", "--router", "cache_aware"]}


def _simulate_all(spec: Path, out: Path, pure: bool) -> None:
    code = ("import sys; from servetwin.cli import main\n"
            "for name, extra in " + repr(RUNS) + ".items():\n"
            "    engine = 'sglang-0.4.1' if name == 'cluster' else name\n"
            f"    assert main(['simulate', '--scenario', {str(spec)!r}, '--engine', engine, '--chunks',\n"
            f"                 '--hardware', 'a100-80g', '--out', {str(out)!r} + '/' + name, *extra]) == 0\n"
            "import simulator.native as n, json; print(json.dumps(n.status()))")
    env = {k: v for k, v in os.environ.items() if k != "SERVETWIN_PURE"} | ({"SERVETWIN_PURE": "1"} if pure else {})
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    mode = json.loads(done.stdout.strip().splitlines()[-1])["mode"]
    assert mode == ("pure" if pure else native.status()["mode"]), done.stdout


def test_pure_and_compiled_modules_give_the_same_bytes(tmp_path):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps(SCENARIO))
    _simulate_all(spec, tmp_path / "pure", pure=True)
    _simulate_all(spec, tmp_path / "this", pure=False)
    files = sorted(p.relative_to(tmp_path / "pure") for p in (tmp_path / "pure").rglob("*") if p.is_file())
    assert len(files) >= 3 * len(RUNS)
    for f in files:
        assert (tmp_path / "pure" / f).read_bytes() == (tmp_path / "this" / f).read_bytes(), f


def test_make_test_runs_the_compiled_modules():
    if not os.environ.get("SERVETWIN_EXPECT_NATIVE"):
        pytest.skip("run by make test, which builds the compiled modules first (make native)")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: make native leaves the sources to run")
    st = native.status()
    assert st["mode"] == "native", st["why"]
    import simulator.engine
    import simulator.schedulers.sglang
    for mod in (simulator.engine, simulator.schedulers.sglang):
        assert str(mod.__file__).endswith(".so"), mod.__file__


def test_a_build_is_used_only_while_it_matches_the_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVETWIN_PURE", raising=False)
    monkeypatch.setattr(native, "OUT", tmp_path)
    monkeypatch.setattr(native, "MANIFEST", tmp_path / "manifest.json")
    assert native._compiled_files() == (None, "not built (make native)")
    import importlib.machinery
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    sources = native.source_hashes()
    (tmp_path / "manifest.json").write_text(json.dumps({"suffix": suffix, "sources": sources}))
    files, why = native._compiled_files()
    assert files is None and why.startswith("build incomplete")
    for name in native._library_names():
        f = tmp_path / (name.replace(".", "/") + suffix)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"")
    files, why = native._compiled_files()
    assert files is not None and set(files) == {*native.MODULES, f"{native.GROUP}__mypyc"}, why
    edited = dict(sources, **{"simulator.engine": "0" * 64})
    (tmp_path / "manifest.json").write_text(json.dumps({"suffix": suffix, "sources": edited}))
    assert native._compiled_files() == (None, "a source changed since the build (make native)")
    (tmp_path / "manifest.json").write_text(json.dumps({"suffix": ".other.so", "sources": sources}))
    assert native._compiled_files()[1].startswith("built for .other.so")
    monkeypatch.setenv("SERVETWIN_PURE", "1")
    assert native._compiled_files() == (None, "SERVETWIN_PURE is set")
