"""Time the step shapes the simulator prices on real kernels: ``servetwin calibrate gpu-probe`` (or, on a
machine with PyTorch and nothing else of ours, ``python -m calibrate.gpu_probe``).

A model's decoder layers are built with random weights (``calibrate.gpu_layers``); ``--layers`` of them are
timed per step shape — after warm-up, with CUDA events on a GPU (the wall clock on a CPU) — and scaled to
the model's depth, plus the final norm and LM head over the step's sampled rows timed apart:

    step_s = layer_s × model layers + head_s

The grid (``GRIDS``): prefill chunks of q ∈ {128 … 8,192} new tokens over c ∈ {0 … 12,288} cached,
decode batches of b ∈ {1 … 256} at context ctx ∈ {512 … 16,384} (where b·ctx fits a serving engine's KV on
an 80 GB card: ``max_kv_tokens``), and mixed chunked steps (a chunk beside decodes). ``--dry-run`` runs a
tiny grid on whatever device there is (a CPU in CI).

Writes a directory (output kind ``gpu-probe``): ``probes.parquet`` (``probes.csv`` where pyarrow is not
installed), ``gpu-probe.json`` (device, clocks, library versions, model, grid, wall time) and
``summary.txt``. ``servetwin calibrate fit DIR --base h100`` fits a profile's efficiencies to it."""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from calibrate.gpu_grid import COLUMNS, GRIDS, Dims, Grid, Step, row_keys
from calibrate.gpu_layers import Layer, Rotary, StepKV, layer_forward, lm_head
from foundation.errors import ServetwinError, SpecError

MODELS = Path(__file__).resolve().parent.parent / "simulator" / "profiles" / "models"


def model_dims(name: str) -> tuple[Dims, str]:
    """A model profile's shapes and dtype (the profile YAML under simulator/profiles/models)."""
    import yaml
    path = MODELS / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in MODELS.glob("*.yaml")))
        raise SpecError(f"gpu-probe --model {name!r}: no such model profile; known: {known}")
    doc = yaml.safe_load(path.read_text())
    val = {k: (v["value"] if isinstance(v, dict) else v) for k, v in doc.items()}
    return Dims(hidden=val["hidden"], ffn=val["ffn"], heads=val["heads"], kv_heads=val["kv_heads"],
                head_dim=val["head_dim"], vocab=val["vocab"], layers=val["layers"]), str(doc.get("dtype", "bf16"))


def timer(device: torch.device) -> Callable[[Callable[[], object], int, int], list[float]]:
    """Seconds per call after warm-up: CUDA events around each call on a GPU, the wall clock elsewhere."""
    def cuda(fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(device)
        out = []
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        return out

    def wall(fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    return cuda if device.type == "cuda" else wall


def _quantile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]


class Probe:
    """The timed layers, the LM head and the rotary tables on one device."""

    def __init__(self, d: Dims, n_layers: int, device: torch.device, dtype: torch.dtype, max_pos: int):
        self.d, self.device, self.dtype = d, device, dtype
        self.layers = [Layer(d, device, dtype) for _ in range(n_layers)]
        self.head_w = torch.empty(d.vocab, d.hidden, device=device, dtype=dtype).normal_(0.0, d.hidden ** -0.5)
        self.head_norm = torch.ones(d.hidden, device=device, dtype=dtype)
        self.rope = Rotary(d, max_pos, device, dtype)
        self.time = timer(device)

    @torch.inference_mode()
    def measure(self, kind: str, step: Step, grid: Grid) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()                # the last shape's KV
        kvs = [StepKV(self.d, step, self.device, self.dtype) for _ in self.layers]   # each layer's own KV
        x0 = torch.empty(step.new_tokens, self.d.hidden, device=self.device, dtype=self.dtype).normal_()

        def layers() -> torch.Tensor:
            x = x0
            for layer, kv in zip(self.layers, kvs, strict=True):
                x = layer_forward(layer, step, x, kv, self.rope)
            return x

        rows = x0[:step.sampled]
        per = [t / len(self.layers) for t in self.time(layers, grid.warmup, grid.repeats)]
        head = statistics.median(self.time(lambda: lm_head(rows, self.head_norm, self.head_w, self.d.rms_eps),
                                           grid.warmup, grid.repeats))
        med = statistics.median(per)
        return {**row_keys(kind, step), "layers_timed": len(self.layers),
                "model_layers": self.d.layers, "layer_s": med, "layer_s_p10": _quantile(per, 0.1),
                "layer_s_p90": _quantile(per, 0.9), "head_s": head, "step_s": med * self.d.layers + head,
                "repeats": grid.repeats}


def device_facts(device: torch.device) -> dict[str, Any]:
    """What ran the probe: the device, its clocks where nvidia-smi answers, and the libraries' versions."""
    facts: dict[str, Any] = {"device": device.type, "torch": torch.__version__, "python": platform.python_version(),
                             "host": platform.machine()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        facts.update(name=p.name, memory_gib=round(p.total_memory / 2**30, 2), sm_count=p.multi_processor_count,
                     capability=f"{p.major}.{p.minor}", cuda=torch.version.cuda)
        try:
            q = "name,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,driver_version"
            facts["nvidia_smi"] = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                                                 capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            facts["nvidia_smi"] = None
    else:
        facts["name"] = platform.processor() or platform.machine()
    for lib in ("triton", "transformers", "numpy"):
        try:
            facts[lib] = __import__(lib).__version__
        except ImportError:
            facts[lib] = None
    return facts


def write_rows(out: Path, rows: list[dict[str, Any]]) -> str:
    """probes.parquet where pyarrow is installed, else probes.csv; returns the file's name."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        with (out / "probes.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
        return "probes.csv"
    pq.write_table(pa.Table.from_pylist(rows), out / "probes.parquet")
    return "probes.parquet"


def summary_lines(meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"gpu-probe: {meta['model']} ({meta['layers_timed']} of {meta['model_layers']} layers timed, "
             f"{meta['dtype']}) on {meta['facts'].get('name')} [{meta['facts']['device']}], "
             f"{len(rows)} shapes in {meta['wall_s']:.1f} s", f"{'kind':8s} {'q':>6s} {'c':>6s} {'b':>4s} "
             f"{'ctx':>6s} {'step ms':>9s} {'layer spread':>13s}"]
    for r in rows:
        spread = (r["layer_s_p90"] - r["layer_s_p10"]) / r["layer_s"] if r["layer_s"] > 0 else 0.0
        lines.append(f"{r['kind']:8s} {r['q']:6d} {r['c']:6d} {r['b']:4d} {r['ctx']:6d} {r['step_s'] * 1e3:9.3f} "
                     f"{spread:12.1%}")
    return lines


def run(out: str, model: str = "llama-3.1-8b", layers: int | None = None, dry_run: bool = False,
        device_name: str | None = None) -> Path:
    """The whole probe into ``out`` (written atomically; an existing directory is replaced only when it is a
    probe's)."""
    from foundation.outputs import staged_dir
    d, dtype_name = model_dims(model)
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not dry_run:
        raise SpecError(f"gpu-probe: no CUDA device here (torch {torch.__version__}); --dry-run runs the tiny grid "
                        "on the CPU")
    if layers is not None and layers < 1:
        raise SpecError(f"gpu-probe --layers {layers}: must be at least 1")
    grid = GRIDS["dry" if dry_run else "gpu"]
    n = min(layers or (2 if dry_run else 4), d.layers)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}.get(dtype_name, torch.bfloat16)
    torch.manual_seed(0)
    steps = grid.steps()
    max_pos = max(max([q + c for s in (st for _, st in steps) for q, c in s.prefills] or [1]),
                  max([ctx + 1 for _, st in steps for ctx in st.decodes] or [1]))
    t0 = time.perf_counter()
    probe = Probe(d, n, device, dtype, max_pos)
    rows = [probe.measure(kind, st, grid) for kind, st in steps]
    meta = {"kind": "gpu-probe", "model": model, "dims": asdict(d), "dtype": dtype_name, "layers_timed": n,
            "model_layers": d.layers, "dry_run": dry_run, "grid": asdict(grid), "facts": device_facts(device),
            "wall_s": time.perf_counter() - t0,
            "method": "step_s = median per-layer time x model layers + final norm and LM head; eager launches"}
    with staged_dir(out, "gpu-probe") as tmp:
        meta["rows_file"] = write_rows(tmp, rows)
        (tmp / "gpu-probe.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        (tmp / "summary.txt").write_text("\n".join(summary_lines(meta, rows)) + "\n")
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibrate.gpu_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers timed (default 4; 2 in a dry run)")
    ap.add_argument("--dry-run", action="store_true", help="the tiny grid, on a CPU where there is no GPU")
    ap.add_argument("--device", default=None, help="torch device (default: cuda where there is one, else cpu)")
    a = ap.parse_args(argv)
    try:
        out = run(a.out, a.model, a.layers, a.dry_run, a.device)
    except ServetwinError as err:
        print(f"gpu-probe: error: {' '.join(str(err).split())}", file=sys.stderr)
        return err.exit_code
    print((out / "summary.txt").read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
