"""Vidur's profiling data for one A100-80GB and Llama-3-8B, written from servetwin's own cost model, where Vidur's
own (Hugging Face datasets it downloads at start) cannot be fetched: the peer benchmark compares the two
simulators' speed, so what matters is that both simulate comparable work, not that Vidur's latencies are its own.

Each operator Vidur's random-forest predictor learns (``vidur/execution_time_predictor/
sklearn_execution_time_predictor.py``: the linear layers, norms, activation, rotary embedding and residual add per
token count; prefill attention per chunk and cached context; decode attention per batch and context; the KV save)
is priced per layer as servetwin prices a step — a roofline of its FLOPs and bytes with the a100-80g profile's
efficiencies, the two terms summed in quadrature (docs/cost-model.md) — in milliseconds, as Vidur's profiler
records them. The datasets are written as Hugging Face snapshots in Vidur's cache, so ``HF_HUB_OFFLINE=1`` finds
them: compute ``servetwin/a100-llama-3-8b-roofline`` (config: model, device SKU), network
``servetwin/a100-pairwise-nvlink`` (tables with a header only: one replica, no tensor or pipeline parallelism).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.profiles import load_hardware

COMPUTE, NETWORK = "servetwin/a100-llama-3-8b-roofline", "servetwin/a100-pairwise-nvlink"
H, Q_HEADS, KV_HEADS, FFN, VOCAB = 4096, 32, 8, 14336, 128256
HEAD = H // Q_HEADS
KV = KV_HEADS * HEAD                    # K (or V) width per token
BYTES = 2                               # bf16
REVISION = "0" * 40


def _roofline(flops: np.ndarray | float, nbytes: np.ndarray | float) -> np.ndarray:
    hw = load_hardware("a100-80g")
    c = np.asarray(flops, dtype=float) / (hw.eta_compute * hw.peak_flops)
    m = np.asarray(nbytes, dtype=float) / (hw.eta_bandwidth * hw.mem_bandwidth)
    return np.hypot(c, m) * 1e3                         # ms, as Vidur's profiles


def _gemm(t: np.ndarray, k: int, n: int) -> np.ndarray:
    return _roofline(2.0 * t * k * n, BYTES * (k * n + t * k + t * n))


def mlp_table() -> pd.DataFrame:
    t = np.unique(np.concatenate([np.arange(1, 129), np.arange(128, 8193, 32)])).astype(float)
    ops = {"attn_pre_proj": _gemm(t, H, H + 2 * KV), "attn_post_proj": _gemm(t, H, H),
           "mlp_up_proj": _gemm(t, H, 2 * FFN), "mlp_down_proj": _gemm(t, FFN, H),
           "mlp_act": _roofline(4.0 * t * FFN, BYTES * t * 3 * FFN),
           "input_layernorm": _roofline(4.0 * t * H, BYTES * t * 2 * H),
           "post_attention_layernorm": _roofline(4.0 * t * H, BYTES * t * 2 * H),
           "attn_rope": _roofline(6.0 * t * (H + KV), BYTES * t * 2 * (H + KV)),
           "add": _roofline(t * H, BYTES * t * 3 * H)}
    df = pd.DataFrame({"n_head": Q_HEADS, "n_kv_head": KV_HEADS, "n_embd": H, "n_expanded_embd": FFN,
                       "use_gated_mlp": True, "vocab_size": VOCAB, "num_tensor_parallel_workers": 1,
                       "num_tokens": t.astype(int)})
    for name, ms in ops.items():
        df[f"time_stats.{name}.median"] = ms
    return df


def attention_table(block_size: int = 16) -> pd.DataFrame:
    rows = []
    for q in range(32, 4097, 128):                      # prefill: one chunk of q tokens over c cached
        for c in range(0, 8193, 512):
            flops = 4.0 * q * (c + (q + 1) / 2) * H
            rows.append((1, c, q, float(_roofline(flops, BYTES * ((c + q) * 2 * KV + 2 * q * H))), 0.0))
    for b in (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128):     # decode: b sequences of c context each
        for c in range(128, 8193, 256):
            rows.append((b, c, 0, 0.0, float(_roofline(4.0 * b * c * H, BYTES * (b * c * 2 * KV + 2 * b * H)))))
    df = pd.DataFrame(rows, columns=["batch_size", "kv_cache_size", "prefill_chunk_size",
                                     "time_stats.attn_prefill.median", "time_stats.attn_decode.median"])
    tokens = df[["prefill_chunk_size", "batch_size"]].max(axis=1).to_numpy(float)
    df["time_stats.attn_kv_cache_save.median"] = _roofline(0.0, BYTES * tokens * 4 * KV)
    for k, v in {"n_embd": H, "n_q_head": Q_HEADS, "n_kv_head": KV_HEADS, "block_size": block_size,
                 "num_tensor_parallel_workers": 1}.items():
        df[k] = v
    return df


def _snapshot(cache: Path, repo: str, config: dict, tables: dict[str, pd.DataFrame]) -> Path:
    org, name = repo.split("/")
    root = cache / f"datasets--{org}--{name}"
    snap = root / "snapshots" / REVISION
    snap.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(REVISION)
    (snap / "config.json").write_text(json.dumps(config))
    for file, df in tables.items():
        df.to_csv(snap / file, index=False, compression="xz")
    return snap


def write(cache_dir: Path) -> tuple[str, str]:
    """Write both datasets under Vidur's ``cache_dir``; returns (compute, network) dataset names."""
    net = pd.DataFrame(columns=["num_workers", "devices_per_node", "collective", "size", "time_stats.all_reduce.median",
                                "time_stats.send_recv.median"])
    _snapshot(cache_dir / "profiling_data" / "compute", COMPUTE, {"model": "meta-llama/Llama-3-8B",
                                                                  "device_sku": "a100"},
              {"mlp.csv.xz": mlp_table(), "attention.csv.xz": attention_table()})
    _snapshot(cache_dir / "profiling_data" / "network", NETWORK, {"sku": "a100_pairwise_nvlink"},
              {"all_reduce.csv.xz": net, "send_recv.csv.xz": net})
    return COMPUTE, NETWORK


if __name__ == "__main__":
    import sys
    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else ".vidur_cache")))
