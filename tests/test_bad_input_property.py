"""Random bytes and random YAML fed to every command that reads a file: each ends in success or in one line
(exit 1 or 2), never a traceback, an internal error or a partial output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servetwin.cli import main

ROOT = Path(__file__).parent.parent
SMALL = ROOT / "scenarios" / "examples" / "cpu-small.yaml"

scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | st.text(max_size=12)
keys = st.sampled_from(["seed", "duration_s", "arrivals", "rate", "kind", "prompts", "length", "sharing", "name",
                        "topology", "workers", "base", "arms", "engine", "cost", "peak_flops", "value", "source",
                        "format_version", "counts", "digests", "run_id", "scenario"]) | st.text(max_size=8)
trees = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
                     max_leaves=20)
payloads = st.binary(max_size=300) | trees.map(lambda t: yaml.safe_dump(t).encode()) | \
    trees.map(lambda t: json.dumps(t, default=str).encode())


def _outcome(capsys: pytest.CaptureFixture[str], args: list[str], out: Path) -> None:
    rc = main(args)
    _, err = capsys.readouterr()
    if rc == 0:
        return
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc in (1, 2), (args, rc, err)
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, (args, err)
    assert not out.exists(), (args, "partial output left")


def _fresh(tmp: Path) -> Path:
    shutil.rmtree(tmp / "case", ignore_errors=True)
    (tmp / "case").mkdir()
    return tmp / "case"


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])


@SETTINGS
@given(data=payloads, which=st.sampled_from(["compile", "sweep", "hardware", "model", "campaign"]))
def test_random_yaml_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, which: str) -> None:
    d = _fresh(tmp_path)
    f = d / "in.yaml"
    f.write_bytes(data)
    out = d / "out"
    args = {"compile": ["trace", "compile", "--scenario", str(f), "--out", str(out)],
            "sweep": ["sweep", str(f), "--out", str(out), "--jobs", "1", "--quick"],
            "hardware": ["simulate", "--scenario", str(SMALL), "--engine", "vllm-0.6.3", "--hardware", str(f),
                         "--out", str(out)],
            "model": ["simulate", "--scenario", str(SMALL), "--engine", "vllm-0.6.3", "--model", str(f),
                      "--out", str(out)],
            "campaign": ["live", "campaign", str(f), "--out", str(out)]}[which]
    if which == "sweep":
        out.mkdir()                   # a sweep's directory is made up front; what matters is no run in it
        _outcome(capsys, args, out / "none")
        assert not [p for p in out.rglob("run.json")] or main(["analyze", str(out)]) == 0
        return
    _outcome(capsys, args, out)


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("sealed")
    assert main(["trace", "compile", "--scenario", str(SMALL), "--set", "duration_s=20", "--out",
                 str(base / "t")]) == 0
    assert main(["simulate", "--trace", str(base / "t"), "--engine", "vllm-0.6.3", "--hardware", "cpu-base",
                 "--model", "tiny-llama", "--out", str(base / "r")]) == 0
    return base / "t", base / "r"


def _damaged(tmp: Path, sealed: Path, name: str, data: bytes) -> tuple[Path, Path]:
    """A copy of a sealed trace or record with one file replaced by ``data``; and an output path."""
    d = _fresh(tmp)
    copy = Path(shutil.copytree(sealed, d / sealed.name))
    (copy / name).write_bytes(data)
    return copy, d / "out"


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], out: Path, codes: tuple[int, ...]) -> None:
    rc = main(args)
    _, err = capsys.readouterr()
    assert rc in codes and len(err.strip().splitlines()) == 1 and "internal error" not in err, (args, err)
    assert not out.exists()


@SETTINGS
@given(data=payloads, name=st.sampled_from(["manifest.json", "dag.npy", "prefix.npy", "segments.npy"]),
       which=st.sampled_from(["validate", "show", "simulate"]))
def test_random_trace_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], sealed: tuple[Path, Path],
                            data: bytes, name: str, which: str) -> None:
    t, out = _damaged(tmp_path, sealed[0], name, data)
    args = {"validate": ["trace", "validate", str(t)], "show": ["trace", "show", str(t)],
            "simulate": ["simulate", "--trace", str(t), "--engine", "vllm-0.6.3", "--out", str(out)]}[which]
    _refused(capsys, args, out, (1, 2))


@SETTINGS
@given(data=payloads, name=st.sampled_from(["run.json", "requests.parquet", "telemetry.parquet"]),
       which=st.sampled_from(["analyze", "figures", "report", "fit", "compare", "decode-scale"]))
def test_random_record_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], sealed: tuple[Path, Path],
                             data: bytes, name: str, which: str) -> None:
    r, out = _damaged(tmp_path, sealed[1], name, data)
    args = {"analyze": ["analyze", str(r)], "figures": ["figures", str(r), "--out", str(out)],
            "report": ["report", str(r), "--out", str(out)],
            "fit": ["calibrate", "fit", str(r), "--out", str(out)],
            "compare": ["compare", str(out), str(r), "--hardware", "cpu-base"],
            "decode-scale": ["calibrate", "decode-scale", str(r), "--hardware", "cpu-base", "--out", str(out)]}[which]
    _refused(capsys, args, out, (2,))
