"""The engine's *resolved* configuration, read from its start-up log, its ``/metrics`` info series
and SGLang's server-info endpoint — never from the flags passed (the study's first recommendation) —
and compared with what the run was meant to test."""

from __future__ import annotations

import ast
import contextlib
import re
from typing import Any

from analysis.redact import redact

_V_INIT = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v([^)]+)\) with config: (.*)$")
_KV = re.compile(r"(\w+)=('[^']*'|\"[^\"]*\"|[^,\s]+)")
_NONDEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_GPU_BLOCKS = re.compile(r"# GPU blocks: (\d+), # CPU blocks: (\d+)")
_KV_TOKENS = re.compile(r"(?:GPU |CPU )?KV cache size: ([\d,]+) tokens")
_SG_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)\s*$")
_SG_ARGS_DICT = re.compile(r"server_args=(\{.*\})\s*$")
_SG_POOL = re.compile(r"max_total_num_tokens=(\d+), (?:chunked_prefill_size=(-?\d+), )?max_prefill_tokens=(\d+), "
                      r"max_running_requests=(\d+), context_len=(\d+)")
KEEP = ("max_seq_len", "enable_prefix_caching", "enable_chunked_prefill", "chunked_prefill_enabled",
        "use_v2_block_manager", "num_scheduler_steps", "enforce_eager", "dtype", "tensor_parallel_size", "seed",
        "use_async_output_proc", "device_config")


def _value(s: str) -> Any:
    s = s.strip().rstrip(",")
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return s


def parse_vllm_log(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if m := _NONDEFAULT.search(line):
            with contextlib.suppress(ValueError, SyntaxError):
                out.update({f"arg.{k}": v for k, v in ast.literal_eval(m.group(1)).items()})
        if m := _V_INIT.search(line):
            out["engine"], out["version"] = "vllm", m.group(1)
            for k, v in _KV.findall(m.group(2)):
                if k in KEEP:
                    out[k] = _value(v)
            if "chunked_prefill_enabled" in out:
                out["enable_chunked_prefill"] = out.pop("chunked_prefill_enabled")
        if m := _CHUNKED.search(line):
            out["max_num_batched_tokens"] = int(m.group(1))
        if m := _GPU_BLOCKS.search(line):
            out["num_gpu_blocks"] = int(m.group(1))
        if m := _KV_TOKENS.search(line):
            out["kv_cache_size_tokens"] = int(m.group(1).replace(",", ""))
    return out


def parse_sglang_log(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if m := _SG_ARGS.search(line):
            out["engine"] = "sglang"
            for k, v in _KV.findall(m.group(1)):
                out[k] = _value(v)
        elif m := _SG_ARGS_DICT.search(line):
            out["engine"] = "sglang"
            with contextlib.suppress(ValueError, SyntaxError):
                out.update({k: v for k, v in ast.literal_eval(m.group(1)).items()
                            if isinstance(v, str | int | float | bool) or v is None})
        if m := _SG_POOL.search(line):
            out["max_total_tokens"] = int(m.group(1))
            if m.group(2):
                out["chunked_prefill_size"] = int(m.group(2))
            out["max_prefill_tokens"] = int(m.group(3))
            out["max_running_requests"] = int(m.group(4))
            out["context_length"] = int(m.group(5))
    return out


def parse_log(text: str) -> dict[str, Any]:
    return parse_sglang_log(text) if "server_args=" in text else parse_vllm_log(text)


def from_metrics_info(labels: dict[str, str]) -> dict[str, Any]:
    """``vllm:cache_config_info`` labels → typed values."""
    out: dict[str, Any] = {}
    for k, v in labels.items():
        if k in ("engine", "model_name") or k.startswith("_"):
            continue
        out[k] = _value(v) if v not in ("None", "") else None
    return out


ALIASES = {"max_model_len": ("max_seq_len", "context_length"), "num_gpu_blocks": ("num_gpu_blocks",),
           "max_total_tokens": ("max_total_tokens", "max_total_num_tokens"), "block_size": ("block_size", "page_size")}


def resolved(log: dict[str, Any], metrics: dict[str, Any], server_info: dict[str, Any]) -> dict[str, Any]:
    """One dict: server info, then /metrics info, then the log (later sources win ties on the same key).
    The flags that were passed are kept too, as ``arg.<name>``, for what the engine does not report."""
    out: dict[str, Any] = {}
    for src in (server_info, metrics, log):
        out.update(src)
    for canon, names in ALIASES.items():
        for n in names:
            if n in out and canon not in out:
                out[canon] = out[n]
    return redact(out)


def mismatches(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Keys whose resolved value differs from what the run meant to test (missing keys are reported)."""
    out = []
    for k, want in expected.items():
        have = got.get(k)
        if have is None:
            out.append(f"{k}: expected {want!r}, engine did not report it")
        elif str(have).lower() != str(want).lower():
            out.append(f"{k}: expected {want!r}, engine resolved {have!r}")
    return out
