"""The GPU probe: its dry run on the CPU (the real PyTorch code path, in the vLLM CPU build's environment, which
has PyTorch), its attention against a reference written out by hand, and the fit of a profile's efficiencies
recovering known ones from probe rows synthesised by the cost model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibrate.fit import with_params
from calibrate.gpu_fit import FAMILY, bare, predict, shape
from calibrate.gpu_grid import GRIDS, Step, row_keys
from servetwin.cli import main
from simulator.profiles import load_hardware, load_model

ROOT = Path(__file__).resolve().parent.parent
TORCH_PY = ROOT / ".engine-venv" / "bin" / "python"
TRUE = {"eta_compute": 0.45, "eta_bandwidth": 0.71, "kappa_kv": 1.6, "kappa_attn": 0.7}
FIXED_S = 0.0018


def servetwin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servetwin.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)


def synthetic_probe(d: Path, noise: float = 0.01, model: str = "llama-3.1-8b") -> list[dict]:
    """A gpu-probe directory whose times come from the cost model with known efficiencies (1 % noise)."""
    hw, mp = load_hardware("h100"), load_model(model)
    rows = [row_keys(k, st) for k, st in GRIDS["gpu"].steps()]
    truth = predict(bare(with_params(hw, "vllm-v1", TRUE), FIXED_S), mp, [shape(r) for r in rows])
    rng = np.random.default_rng(3)
    for r, t in zip(rows, truth * rng.normal(1.0, noise, len(rows)), strict=True):
        r["step_s"] = float(t)
    d.mkdir()
    pd.DataFrame(rows).to_parquet(d / "probes.parquet")
    (d / "gpu-probe.json").write_text(json.dumps({"kind": "gpu-probe", "model": model, "rows_file": "probes.parquet",
                                                  "facts": {"name": "synthetic"}}))
    return rows


def test_rows_describe_the_steps_the_cost_model_prices():
    for kind, st in GRIDS["gpu"].steps():
        b = shape(row_keys(kind, st))
        assert b.prefill_tokens + b.decodes == st.new_tokens
        assert b.decodes == len(st.decodes) and b.decode_ctx == sum(st.decodes)
        assert b.prefill_ctx == sum(c for _, c in st.prefills)
        assert b.sampling_prefills + b.decodes == st.sampled
    decodes = [st for k, st in GRIDS["gpu"].steps() if k == "decode"]
    assert all(len(st.decodes) * st.decodes[0] <= GRIDS["gpu"].max_kv_tokens for st in decodes)
    assert {len(st.decodes) for st in decodes} >= {1, 256} and {st.decodes[0] for st in decodes} >= {512, 16384}


def test_fit_recovers_known_efficiencies(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    synthetic_probe(tmp_path / "probe")
    out = tmp_path / "h100-probed.yaml"
    assert main(["calibrate", "fit", str(tmp_path / "probe"), "--base", "h100", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "committed med" in printed and "fitted residual by decode_b" in printed
    hw, base = load_hardware(str(out)), load_hardware("h100")
    for k, v in TRUE.items():
        assert getattr(hw, k) == pytest.approx(v, rel=0.05), k
    assert hw.name == "h100-probed" and hw.overheads == base.overheads     # engines' own overheads untouched
    fit = yaml.safe_load(out.read_text())["fit"]
    assert fit["forward_fixed_s"] == pytest.approx(FIXED_S, rel=0.15)
    errors = fit["errors"]
    assert errors["fitted"]["all"]["median_ape"] < 0.02 < errors["committed"]["all"]["median_ape"]
    assert set(errors["fitted"]) == {"prefill", "decode", "mixed", "all"}
    assert FAMILY not in yaml.safe_load(out.read_text())["cost"]["overheads"]


def test_fit_refusals_are_one_line(tmp_path: Path):
    synthetic_probe(tmp_path / "probe")
    (tmp_path / "live").mkdir()
    for args, words in (
            (["--model", "qwen2.5-7b"], "the probes timed ['llama-3.1-8b']"),
            ([str(tmp_path / "live")], "cannot be fitted together")):
        r = servetwin("calibrate", "fit", str(tmp_path / "probe"), *args, "--base", "h100",
                      "--out", str(tmp_path / "x.yaml"))
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_probe_refusals_are_one_line(tmp_path: Path):
    r = servetwin("calibrate", "gpu-probe", "--dry-run", "--out", str(tmp_path / "p"), "--python", "/no/such/python")
    assert r.returncode == 2 and "no such interpreter" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    r = servetwin("calibrate", "gpu-probe", "--dry-run", "--out", str(foreign), "--python", str(TORCH_PY))
    assert r.returncode == 2 and (foreign / "notes.txt").read_text() == "keep me"


needs_torch = pytest.mark.xdist_group("engine")    # PyTorch is in the vLLM CPU build's environment (make engine)


@needs_torch
def test_dry_run_times_every_shape_and_fits(tmp_path: Path):
    assert TORCH_PY.exists(), "the vLLM CPU build's environment is missing (make engine installs it)"
    out = tmp_path / "probe"
    for _ in range(2):                          # the second run replaces the first (a probe's own directory)
        r = servetwin("calibrate", "gpu-probe", "--dry-run", "--model", "tiny-llama", "--out", str(out),
                      "--python", str(TORCH_PY))
        assert r.returncode == 0, r.stderr
    meta = json.loads((out / "gpu-probe.json").read_text())
    assert meta["dry_run"] and meta["facts"]["device"] == "cpu" and meta["facts"]["torch"]
    rows_file = out / meta["rows_file"]
    rows = pd.read_csv(rows_file) if rows_file.suffix == ".csv" else pd.read_parquet(rows_file)
    assert len(rows) == len(GRIDS["dry"].steps()) and (rows["step_s"] > 0).all()
    assert (rows["step_s"] >= rows["layer_s"] * 4).all() and set(rows["kind"]) == {"prefill", "decode", "mixed"}
    assert "gpu-probe: tiny-llama (2 of 4 layers timed" in (out / "summary.txt").read_text()
    r = servetwin("calibrate", "fit", str(out), "--base", "cpu-base", "--out", str(tmp_path / "cpu.yaml"),
                  "--accept-poor-fit")
    assert r.returncode == 0, r.stderr
    assert load_hardware(str(tmp_path / "cpu.yaml")).name == "cpu"


ATTENTION_CHECK = """
import math, torch
from calibrate.gpu_grid import Dims, Step
from calibrate.gpu_layers import Rotary, StepKV, attention
torch.manual_seed(0)
d = Dims(hidden=64, ffn=128, heads=4, kv_heads=2, head_dim=16, vocab=32, layers=1)
step = Step(prefills=((5, 7),), decodes=(9, 9, 4))
kv = StepKV(d, step, torch.device("cpu"), torch.float64)
rope = Rotary(d, 64, torch.device("cpu"), torch.float64)
qkv = torch.randn(step.new_tokens, (d.heads + 2 * d.kv_heads) * d.head_dim, dtype=torch.float64)
out = attention(d, step, qkv, kv, rope)
hq, hk, rep = d.heads * d.head_dim, d.kv_heads * d.head_dim, d.heads // d.kv_heads
def ref(qrow, pos, k, v, h):       # one query head over keys 0..pos of its KV head, softmax written out
    q = rope.apply(qrow[h * d.head_dim:(h + 1) * d.head_dim].view(1, d.head_dim), torch.tensor([pos]))[0]
    kk, vv = k[h // rep, :pos + 1], v[h // rep, :pos + 1]
    w = torch.softmax(kk @ q / math.sqrt(d.head_dim), 0)
    return w @ vv
worst = 0.0
(kb, vb), row = kv.prefill[0], 0
for i in range(5):
    for h in range(d.heads):
        got = out[i, h * d.head_dim:(h + 1) * d.head_dim]
        worst = max(worst, (got - ref(qkv[i], 7 + i, kb[0], vb[0], h)).abs().max().item())
row = 5
for ctx, n, kb, vb in kv.decode:
    for j in range(n):
        for h in range(d.heads):
            got = out[row + j, h * d.head_dim:(h + 1) * d.head_dim]
            worst = max(worst, (got - ref(qkv[row + j], ctx, kb[j], vb[j], h)).abs().max().item())
    row += n
print(worst)
"""


@needs_torch
def test_attention_matches_a_softmax_written_out():
    """Prefill chunks see their cached prefix and the chunk causally (lower-right), decodes their whole context
    and their own token; grouped query heads read their KV head: against an explicit softmax per query head."""
    assert TORCH_PY.exists(), "the vLLM CPU build's environment is missing (make engine installs it)"
    r = subprocess.run([str(TORCH_PY), "-c", ATTENTION_CHECK], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.strip()) < 1e-9


def test_step_counts():
    st = Step(prefills=((3, 4),), decodes=(5, 5))
    assert st.new_tokens == 5 and st.sampled == 3
