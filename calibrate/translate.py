"""A live run's *resolved* engine configuration (``engine_config`` of its run.json: the engine's start-up log,
``/metrics`` info and SGLang's server info, ``live.config_capture``) → the simulator preset and overrides
that reproduce it, in the engines' own argument names. What it cannot translate it refuses, in one line,
instead of guessing: an engine it cannot identify, a version no preset models, a knob the simulator does
not model (multi-step scheduling, speculative decoding, SGLang's tensor or data parallelism).

Which preset:

- vLLM releases up to 0.7 run the V0 engine (``vllm/core/scheduler.py``): the ``vllm-0.6.3`` preset, whose
  rules are 0.6.3's — 0.5 and 0.7 releases differ in details it does not model; 0.8 and later (vLLM's CPU
  build 0.32 here) run V1 by default: ``vllm-v1``.
- SGLang 0.4.0–0.4.1: ``sglang-0.4.1``; later releases: ``sglang-current``; earlier ones: refused.

On a CPU there are no CUDA graphs, but a fitted profile's "graph" step overhead is what its probes fit for
pure-decode steps and its "eager" one for steps with prefill, so the graph limit stays as resolved."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from foundation.errors import ServetwinError
from simulator.config import SglangConfig

SGLANG_KNOBS = ("schedule_policy", "chunked_prefill_size", "max_total_tokens", "max_running_requests",
                "context_length", "max_prefill_tokens")
SGLANG_FLAGS = ("disable_radix_cache", "disable_overlap_schedule")
VLLM_FLAGS = ("enable_prefix_caching", "enable_chunked_prefill", "max_model_len")
VLLM_COUNTS = ("max_num_batched_tokens", "max_num_seqs")
VLLM_POLICIES = ("fcfs", "priority")


class Untranslatable(ServetwinError):
    """A resolved configuration the simulator cannot reproduce (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Translation:
    engine: str                     # "vllm" or "sglang"
    version: str
    preset: str
    overrides: dict[str, Any] = field(default_factory=dict)


def _arg(cfg: dict[str, Any], name: str) -> Any:
    """A resolved value, or the flag that was passed where the engine reported none (``arg.<name>``)."""
    return cfg.get(name, cfg.get(f"arg.{name}"))


def engine_of(cfg: dict[str, Any]) -> str:
    """Which engine resolved this configuration: as captured (``engine``), or — in records captured before
    that was written — by keys only one engine reports."""
    if cfg.get("engine") in ("vllm", "sglang"):
        return str(cfg["engine"])
    sglang = any(k in cfg for k in ("schedule_policy", "chunked_prefill_size", "mem_fraction_static"))
    vllm = any(k in cfg for k in ("num_gpu_blocks", "kv_cache_size_tokens", "enable_prefix_caching")) or any(
        k.startswith("arg.") for k in cfg)
    if sglang != vllm:
        return "sglang" if sglang else "vllm"
    raise Untranslatable("cannot tell which engine resolved this configuration (neither a vLLM start-up log "
                         "nor SGLang's server arguments were captured)")


def _release(version: str) -> tuple[int, ...]:
    """"0.6.3.post1" → (0, 6, 3): each of the first three parts' leading digits."""
    nums = [int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split(".")[:3]]
    return tuple(nums + [0] * (3 - len(nums)))


def preset_for(engine: str, version: str) -> str:
    if not version:
        raise Untranslatable(f"the {engine} configuration has no version; its preset depends on it")
    rel = _release(version)
    if engine == "vllm":
        return "vllm-0.6.3" if rel < (0, 8, 0) else "vllm-v1"
    if rel < (0, 4, 0):
        raise Untranslatable(f"SGLang {version}: no preset models releases before 0.4 (sglang-0.4.1, sglang-current)")
    return "sglang-0.4.1" if rel < (0, 4, 2) else "sglang-current"


def _sglang(cfg: dict[str, Any]) -> dict[str, Any]:
    policies = SglangConfig.model_fields["schedule_policy"].annotation.__args__  # type: ignore[union-attr]
    if cfg.get("schedule_policy") and cfg["schedule_policy"] not in policies:
        raise Untranslatable(f"SGLang schedule_policy {cfg['schedule_policy']!r}: the simulator models "
                             f"{', '.join(policies)}")
    for k in ("speculative_algorithm",):
        if cfg.get(k):
            raise Untranslatable(f"SGLang {k}={cfg[k]!r}: speculative decoding is not modelled")
    for k in ("tp_size", "dp_size"):
        if int(cfg.get(k) or 1) > 1:
            raise Untranslatable(f"SGLang {k}={cfg[k]}: the SGLang model runs one GPU per engine")
    over = {k: cfg[k] for k in SGLANG_KNOBS if cfg.get(k)}
    if cfg.get("attention_backend"):
        over["attention_backend"] = str(cfg["attention_backend"])
    over.update({k: bool(cfg[k]) for k in SGLANG_FLAGS if cfg.get(k) is not None})
    return over


def _vllm(cfg: dict[str, Any]) -> dict[str, Any]:
    if int(_arg(cfg, "num_scheduler_steps") or 1) > 1:
        raise Untranslatable(f"vLLM num_scheduler_steps={_arg(cfg, 'num_scheduler_steps')}: multi-step "
                             "scheduling is not modelled")
    if _arg(cfg, "speculative_config") or _arg(cfg, "speculative_model"):
        raise Untranslatable("vLLM speculative decoding is not modelled")
    bs = int(cfg.get("block_size") or 16)
    over: dict[str, Any] = {"block_size": bs}
    over.update({k: _arg(cfg, k) for k in VLLM_FLAGS if _arg(cfg, k) is not None})
    over.update({k: int(_arg(cfg, k)) for k in VLLM_COUNTS if _arg(cfg, k) is not None})
    policy = _arg(cfg, "scheduling_policy")
    if policy and policy not in VLLM_POLICIES:
        raise Untranslatable(f"vLLM scheduling_policy {policy!r}: vLLM's are {', '.join(VLLM_POLICIES)}")
    if policy:
        over["scheduling_policy"] = policy
    tp = _arg(cfg, "tensor_parallel_size")
    if tp and int(tp) > 1:
        over["tensor_parallel_size"] = int(tp)
    tokens = cfg.get("kv_cache_size_tokens")
    blocks = cfg.get("num_gpu_blocks") if not tokens else int(tokens) // bs
    if blocks:
        over["num_gpu_blocks"] = int(blocks)
    return over


def translate(cfg: dict[str, Any], where: str = "") -> Translation:
    """The preset and overrides reproducing ``cfg``; ``where`` (a run's path) prefixes a refusal."""
    try:
        engine = engine_of(cfg)
        version = str(cfg.get("version") or "")
        preset = preset_for(engine, version)
        over = _sglang(cfg) if engine == "sglang" else _vllm(cfg)
    except Untranslatable as err:
        raise Untranslatable(f"{where}: {err}" if where else str(err)) from None
    return Translation(engine, version, preset, over)
