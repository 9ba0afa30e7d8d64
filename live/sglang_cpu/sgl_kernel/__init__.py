"""A pure-PyTorch stand-in for SGLang's CPU kernel package (``sgl_kernel``), which no registry ships for
the CPU. SGLang imports a few names at module level when ``SGLANG_USE_CPU_ENGINE=1``; without AMX ops it
falls back to its ``torch_native`` attention and native layers, so only ``assign_req_to_token_pool_cpu``
is ever called (on every prefill). The others serve speculative decoding, HiCache or mamba models and
raise NotImplementedError. ``torch.ops.sgl_kernel`` stays empty, so every layer takes the native path."""

from __future__ import annotations

import torch


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """For request i: req_to_token[req_pool_indices[i], start_i:end_i] = the next (end_i - start_i) entries
    of out_cache_loc (requests' slices follow each other in out_cache_loc)."""
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    offset = 0
    for row, s, e in zip(rows, starts, ends, strict=True):
        n = e - s
        if n > 0:
            req_to_token[row, s:e] = out_cache_loc[offset:offset + n].to(req_to_token.dtype)
        offset += n


def _unsupported(name: str):  # type: ignore[no-untyped-def]
    def f(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError(f"sgl_kernel.{name} is not available in servetwin's CPU stand-in "
                                  "(speculative decoding, HiCache and mamba models are unsupported)")
    f.__name__ = name
    return f


for _name in ("copy_all_layer_kv_cache_cpu", "rotate_input_ids_cpu", "fill_accept_out_cache_loc_cpu",
              "fill_bonus_tokens_cpu", "verify_tree_greedy_cpu", "build_tree_kernel_efficient_cpu",
              "build_draft_decode_metadata_cpu", "assign_draft_cache_locs_contiguous_cpu",
              "assign_extend_cache_locs_cpu"):
    globals()[_name] = _unsupported(_name)
