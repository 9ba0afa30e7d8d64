"""Engine presets and default resolution, done the way each engine does it at start-up.

Presets: ``vllm-0.6.3``, ``vllm-v1`` (0.33.0), ``sglang-0.4.1``, ``sglang-current`` (0.5.23).
``resolve(preset, hardware, model, context, overrides)`` returns the fully resolved configuration
(every ``None`` filled in, KV capacity computed from the memory rules) or raises SpecError.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from foundation.errors import SpecError
from simulator.config import EngineConfig, SglangConfig, VllmV0Config, VllmV1Config
from simulator.profiles import GIB, HardwareProfile, ModelProfile

ENGINES_DIR = Path(__file__).resolve().parent / "profiles" / "engines"
PRESET_NAMES = ("vllm-0.6.3", "vllm-v1", "sglang-0.4.1", "sglang-current")
FAMILIES: dict[str, type[BaseModel]] = {"vllm-v0": VllmV0Config, "vllm-v1": VllmV1Config, "sglang": SglangConfig}


def preset_data(name: str) -> dict[str, Any]:
    """A preset's data file (``profiles/engines/NAME.yaml``): family and every knob's default with its source, a
    ``base`` preset's knobs under its own."""
    import yaml
    text = (ENGINES_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe, in C
    if "base" in data:
        base = preset_data(data["base"])
        data = {**data, "knobs": {**base["knobs"], **data["knobs"]}}
    return dict(data)


def _presets() -> dict[str, tuple[type[BaseModel], dict[str, Any]]]:
    out = {}
    for name in PRESET_NAMES:
        data = preset_data(name)
        out[name] = (FAMILIES[data["family"]], {k: v["value"] for k, v in data["knobs"].items()})
    return out


PRESETS: dict[str, tuple[type[BaseModel], dict[str, Any]]] = _presets()


def parse_overrides(items: list[str] | None, flag: str = "--set") -> dict[str, Any]:
    """``["k=v", …]`` → dict, values parsed as YAML scalars (true, 2048, 0.88, fcfs)."""
    import yaml
    out: dict[str, Any] = {}
    for it in items or []:
        if "=" not in it:
            raise SpecError(f"{flag} {it!r}: expected key=value")
        k, v = it.split("=", 1)
        out[k.strip()] = yaml.safe_load(v) if v.strip() else None
    return out


def _build(cls: type[BaseModel], fields: dict[str, Any], where: str) -> Any:
    try:
        return cls.model_validate(fields)
    except ValidationError as err:
        from scenarios.spec import format_validation_error
        msg = format_validation_error(err, where)
        if err.errors()[0]["type"] == "extra_forbidden":
            msg += f"; accepted keys: {', '.join(sorted(cls.model_fields))}"
        raise SpecError(msg) from None


def resolve(preset: str, hw: HardwareProfile, model: ModelProfile, context: int | None = None,
            overrides: dict[str, Any] | None = None) -> EngineConfig:
    if preset not in PRESETS:
        raise SpecError(f"engine preset '{preset}' unknown; known: {', '.join(PRESETS)}")
    cls, base = PRESETS[preset]
    fields = {**base, **(overrides or {})}
    cfg = _build(cls, fields, f"engine {preset}")
    if isinstance(cfg, VllmV0Config):
        return _resolve_vllm_v0(cfg, hw, model, context)
    if isinstance(cfg, VllmV1Config):
        return _resolve_vllm_v1(cfg, hw, model, context)
    return _resolve_sglang(cfg, hw, model, context)


def _context(given: int | None, context: int | None, model: ModelProfile) -> int:
    ctx = int(given or context or model.max_context)
    if ctx < 16:
        raise SpecError(f"--context {ctx}: the context length must be at least 16 tokens (default 16384)")
    return ctx


def vllm_activation_gib(model: ModelProfile, batched_tokens: int) -> float:
    """Peak activation memory of vLLM's profile run at ``batched_tokens`` (line through measurements)."""
    return model.activation_base_gib + model.activation_per_token_bytes * batched_tokens / GIB


def _vllm_blocks(hw: HardwareProfile, model: ModelProfile, util: float, tokens: int, block_size: int,
                 tp: int, extra_gib: float = 0.0) -> int:
    budget = hw.memory_cuda_gib * util
    peak = model.weight_bytes / tp / GIB + vllm_activation_gib(model, tokens) + model.non_torch_gib + extra_gib
    block_bytes = block_size * model.kv_bytes_per_token(tp)
    n = math.floor((budget - peak) * GIB / block_bytes)
    if n < 1:
        raise SpecError(f"no KV memory left: {model.name} on {hw.name} at gpu_memory_utilization={util} "
                        f"needs {peak:.2f} GiB of {budget:.2f} GiB; raise utilisation or TP, or lower the "
                        "context")
    return n


def _resolve_vllm_v0(c: VllmV0Config, hw: HardwareProfile, model: ModelProfile,
                     context: int | None) -> VllmV0Config:
    ctx = _context(c.max_model_len, context, model)
    chunked = c.enable_chunked_prefill
    if chunked is None:
        chunked = ctx > 32768  # arg_utils: on by default only for long contexts (CUDA, no LoRA/spec)
    budget = c.max_num_batched_tokens
    if budget is None:
        budget = 512 if chunked else max(ctx, 2048)
    if not chunked and budget < ctx:
        raise SpecError(f"engine vllm-0.6.3: max_num_batched_tokens={budget} < max_model_len={ctx} "
                        "without chunked prefill; accepted: ≥ max_model_len, or chunked prefill on")
    if budget < c.max_num_seqs:
        raise SpecError(f"engine vllm-0.6.3: max_num_batched_tokens={budget} < max_num_seqs={c.max_num_seqs}")
    if chunked and c.enable_prefix_caching and budget % c.block_size:
        raise SpecError(f"engine vllm-0.6.3: max_num_batched_tokens={budget} must be a multiple of "
                        f"block_size={c.block_size} with chunked prefill and prefix caching")
    tp = c.tensor_parallel_size
    blocks = c.num_gpu_blocks or _vllm_blocks(hw, model, c.gpu_memory_utilization, budget, c.block_size, tp)
    return c.model_copy(update={"max_model_len": ctx, "enable_chunked_prefill": chunked,
                                "max_num_batched_tokens": budget, "num_gpu_blocks": blocks})


def _resolve_vllm_v1(c: VllmV1Config, hw: HardwareProfile, model: ModelProfile,
                     context: int | None) -> VllmV1Config:
    ctx = _context(c.max_model_len, context, model)
    mem = hw.memory_cuda_gib
    if mem >= 160:
        tokens, seqs = 16384, 1024
    elif mem >= 70 and not hw.name.startswith("a100"):
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    if not c.enable_chunked_prefill:
        tokens = max(ctx, tokens)
    budget = c.max_num_batched_tokens or tokens
    max_seqs = c.max_num_seqs or seqs
    tp = c.tensor_parallel_size
    blocks = c.num_gpu_blocks or _vllm_blocks(hw, model, c.gpu_memory_utilization, budget, c.block_size, tp,
                                              c.cuda_graph_gib)
    return c.model_copy(update={"max_model_len": ctx, "max_num_batched_tokens": budget,
                                "max_num_seqs": max_seqs, "num_gpu_blocks": blocks})


def _sglang_mem_fraction(c: SglangConfig, hw: HardwareProfile, chunk: int, graph_bs: int) -> float:
    """0.4.1: by TP size alone (server_args.py ``__post_init__``). Current (0.5.23,
    arg_groups/memory_hook.py ``handle_gpu_memory_settings``): (GPU MiB − reserved) / GPU MiB, rounded to
    3 places, GPU MiB as nvidia-smi reports it (``get_nvgpu_memory_capacity``), reserved = 512 + 1.5 ×
    max(chunk, 2048) + TP/8 × 1024 + 2 × the decode graphs' max batch (``reserve_for_graph_mb``), at least
    10 GiB above 60 GiB."""
    tp = c.tensor_parallel_size
    if c.version.startswith("0.4"):
        return 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
    gpu_mib = hw.memory_smi_mib
    reserved = 512 + 1.5 * max(chunk, 2048) + tp / 8 * 1024 + 2 * graph_bs
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


# current SGLang's GPU bands (memory_hook.py): (upper bound MiB, chunk, decode graph max bs at TP < 4, at TP ≥ 4)
_SGLANG_BANDS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
                 (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (float("inf"), 16384, 512, 512))


def _sglang_band(hw: HardwareProfile) -> tuple[float, int, int, int]:
    return next(b for b in _SGLANG_BANDS if hw.memory_smi_mib < b[0])


def _sglang_chunk(c: SglangConfig, hw: HardwareProfile) -> int:
    """0.4.1: 2,048 below 25,000 MiB, else 8,192 (server_args.py); current: by its GPU bands."""
    if c.version.startswith("0.4"):
        return 2048 if hw.memory_smi_mib < 25000 else 8192
    return _sglang_band(hw)[1]


def _sglang_graph_bs(c: SglangConfig, hw: HardwareProfile) -> int:
    """0.4.1: 8 (TP < 4) or 80 below 25,000 MiB, else 160 (server_args.py); current: by its GPU bands, capped
    at max_running_requests when that is given."""
    tp = c.tensor_parallel_size
    if c.version.startswith("0.4"):
        return (8 if tp < 4 else 80) if hw.memory_smi_mib < 25000 else 160
    bs = int(_sglang_band(hw)[2 if tp < 4 else 3])
    return min(bs, c.max_running_requests) if c.max_running_requests else bs


def _resolve_sglang(c: SglangConfig, hw: HardwareProfile, model: ModelProfile,
                    context: int | None) -> SglangConfig:
    ctx = _context(c.context_length, context, model)
    tp = c.tensor_parallel_size
    chunk = c.chunked_prefill_size if c.chunked_prefill_size is not None else _sglang_chunk(c, hw)
    graph_bs = c.cuda_graph_max_bs
    cpu = hw.device == "cpu"
    if graph_bs is None:      # on a CPU: no graphs; every pure-decode step takes the decode-step overhead
        graph_bs = 1 << 20 if cpu else _sglang_graph_bs(c, hw)
    backend = c.attention_backend or ("torch_native" if cpu else "flashinfer")
    stream = c.forward_stream or ("inline" if cpu else "device")
    # On a CPU, SGLang 0.5.23 resolved mem_fraction_static=0.716 of RAM here (observed, not its rule).
    mf = c.mem_fraction_static or (0.716 if cpu else _sglang_mem_fraction(c, hw, max(chunk, 0), graph_bs))
    free_before = hw.memory_cuda_gib - hw.init_used_gib
    free_after = free_before - model.weight_bytes / tp / GIB
    rest = free_after - free_before * (1 - mf)
    pool = c.max_total_tokens or math.floor(rest * GIB / model.kv_bytes_per_token(tp))
    if pool < 1:
        raise SpecError(f"no KV memory left: {model.name} on {hw.name} at mem_fraction_static={mf}")
    max_num_reqs = min(max(int(pool / ctx * 512), 2048), 4096)
    running = c.max_running_requests or min(pool // 2, max_num_reqs + 1)
    return c.model_copy(update={"context_length": ctx, "chunked_prefill_size": chunk,
                                "cuda_graph_max_bs": graph_bs, "mem_fraction_static": mf,
                                "attention_backend": backend, "forward_stream": stream,
                                "max_total_tokens": pool, "max_running_requests": running})


def check_startup(cfg: EngineConfig, longest_request: int) -> None:
    """Refuse at start, as the engines do, a configuration whose KV cache cannot hold one max-length request.

    vLLM 0.6.3 ``Worker._raise_if_cache_size_invalid`` (vllm/worker/worker.py) and V1
    ``check_enough_kv_cache_memory`` (vllm/v1/core/kv_cache_utils.py) refuse to start when ``max_model_len``
    tokens do not fit the KV cache. SGLang starts and caps ``max_req_input_len`` at
    ``min(context_len, max_total_num_tokens) - 1`` (``Scheduler.__init__``, managers/scheduler.py), rejecting
    every longer prompt; here a trace whose longest request (prompt + max_tokens) the pool cannot hold is
    refused up front, since every such request of the run would fail."""
    cap = kv_capacity_tokens(cfg)
    if isinstance(cfg, SglangConfig):
        if cap < longest_request:
            raise SpecError(f"engine sglang {cfg.version}: max_total_tokens={cap} cannot hold the trace's longest "
                            f"request ({longest_request} tokens, prompt + max_tokens); SGLang would reject it — raise "
                            "mem_fraction_static or max_total_tokens, or shorten the prompts")
        return
    assert cfg.max_model_len is not None
    if cap < cfg.max_model_len:
        raise SpecError(f"engine vllm {cfg.version}: the model's max seq len ({cfg.max_model_len}) is larger than "
                        f"the maximum number of tokens that can be stored in KV cache ({cap}); vLLM refuses to start "
                        "— raise gpu_memory_utilization or num_gpu_blocks, or lower max_model_len (--context)")


def kv_capacity_tokens(cfg: EngineConfig) -> int:
    if isinstance(cfg, SglangConfig):
        assert cfg.max_total_tokens is not None
        return cfg.max_total_tokens
    assert cfg.num_gpu_blocks is not None
    return cfg.num_gpu_blocks * cfg.block_size
