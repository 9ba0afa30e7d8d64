"""The peer benchmark's Vidur profiles: the columns Vidur's predictor reads, priced so that more work takes longer,
laid out as the Hugging Face snapshots Vidur resolves offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "perf"))
import vidur_profiles as V  # noqa: E402

OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act", "input_layernorm",
       "post_attention_layernorm", "attn_rope", "add")


def test_the_operator_tables_carry_what_vidur_reads_and_grow_with_the_work():
    mlp = V.mlp_table()
    for col in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "vocab_size",
                "num_tensor_parallel_workers", "num_tokens", *(f"time_stats.{o}.median" for o in OPS)):
        assert col in mlp.columns
    for o in OPS:
        ms = mlp[f"time_stats.{o}.median"].to_numpy()
        assert (ms > 0).all() and (np.diff(ms) >= 0).all()
    att = V.attention_table()
    dec = att[att["prefill_chunk_size"] == 0]
    pre = att[att["prefill_chunk_size"] > 0]
    assert len(dec) and len(pre) and set(att["block_size"]) == {16}
    one = dec[dec["batch_size"] == 8].sort_values("kv_cache_size")["time_stats.attn_decode.median"].to_numpy()
    assert (np.diff(one) > 0).all()                       # a longer context reads more KV
    assert (pre["time_stats.attn_prefill.median"] > 0).all()


def test_the_datasets_are_snapshots_vidur_finds_offline(tmp_path):
    compute, network = V.write(tmp_path)
    for kind, repo in (("compute", compute), ("network", network)):
        root = tmp_path / "profiling_data" / kind / f"datasets--{repo.replace('/', '--')}"
        rev = (root / "refs" / "main").read_text()
        snap = root / "snapshots" / rev
        assert (snap / "config.json").is_file()
    cfg = json.loads((tmp_path / "profiling_data" / "compute" / f"datasets--{compute.replace('/', '--')}" /
                      "snapshots" / V.REVISION / "config.json").read_text())
    assert cfg == {"model": "meta-llama/Llama-3-8B", "device_sku": "a100"}
