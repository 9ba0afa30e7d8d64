"""Engine configurations: one frozen pydantic model per engine family.

Fields left ``None`` are resolved from hardware, model and context length the way the engine does it
(``simulator.presets``); the resolved configuration is what every RunRecord stores.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# which running request gives its KV back (simulator.schedulers.victims.VICTIMS has one chooser per name)
PreemptionVictim = Literal["newest", "fewest_decoded", "oldest", "most_kv"]


class _Cfg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VllmV0Config(_Cfg):
    """vLLM 0.6.3 (V0 engine) knobs, engine defaults."""

    family: Literal["vllm-v0"] = "vllm-v0"
    version: str = "0.6.3"
    max_model_len: int | None = Field(None, ge=16, description="context length (--max-model-len)")
    block_size: int = Field(16, ge=1, description="tokens per KV block")
    enable_prefix_caching: bool = Field(False, description="automatic prefix caching (off by default)")
    enable_chunked_prefill: bool | None = Field(None, description="None: on only above 32K context")
    max_num_batched_tokens: int | None = Field(None, ge=1, description="token budget per step")
    max_num_seqs: int = Field(256, ge=1)
    gpu_memory_utilization: float = Field(0.90, gt=0, le=1)
    watermark: float = Field(0.01, ge=0, lt=1, description="block-manager watermark fraction")
    scheduling_policy: Literal["fcfs", "priority", "lpm"] = Field(
        "fcfs", description="fcfs and priority are vLLM's; lpm is a what-if ordering")
    max_seq_len_to_capture: int = Field(8192, ge=1, description="decode contexts above this run eagerly")
    cuda_graph_max_bs: int = Field(256, ge=0, description="largest captured decode batch")
    num_gpu_blocks: int | None = Field(None, ge=1, description="override the profiled KV block count")
    tensor_parallel_size: int = Field(1, ge=1)
    preemption_victim: PreemptionVictim = Field(
        "newest", description="which running request is preempted (simulator.schedulers.victims); newest is vLLM's")


class VllmV1Config(_Cfg):
    """vLLM V1 engine (0.33.0) knobs."""

    family: Literal["vllm-v1"] = "vllm-v1"
    version: str = "0.33.0"
    max_model_len: int | None = Field(None, ge=16)
    block_size: int = Field(16, ge=1)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_num_batched_tokens: int | None = Field(None, ge=1, description="None: by device memory")
    max_num_seqs: int | None = Field(None, ge=1, description="None: by device memory")
    long_prefill_token_threshold: int = Field(0, ge=0)
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    scheduler_reserve_full_isl: bool = True
    watermark: float = Field(0.0, ge=0, lt=1)
    scheduling_policy: Literal["fcfs", "priority", "lpm"] = "fcfs"
    cuda_graph_max_bs: int = Field(512, ge=0)
    cuda_graph_gib: float = Field(0.5, ge=0, description="CUDA-graph memory estimate (assumed)")
    num_gpu_blocks: int | None = Field(None, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    preemption_victim: PreemptionVictim = Field(
        "newest", description="which running request is preempted (simulator.schedulers.victims); newest is vLLM's")


class SglangConfig(_Cfg):
    """SGLang knobs (0.4.1 defaults; ``sglang-current`` changes a few)."""

    family: Literal["sglang"] = "sglang"
    version: str = "0.4.1"
    context_length: int | None = Field(None, ge=16)
    schedule_policy: Literal["lpm", "fcfs", "dfs-weight", "lof", "priority"] = "lpm"
    lpm_fallback_threshold: int = Field(128, ge=0, description="LPM → FCFS above this many waiting")
    in_batch_prefix_threshold: int = Field(32, ge=0)
    chunked_prefill_size: int | None = Field(None, description="None: by GPU memory; -1 disables")
    max_prefill_tokens: int = Field(16384, ge=1)
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    max_running_requests: int | None = Field(None, ge=1)
    max_total_tokens: int | None = Field(None, ge=1, description="override the profiled KV pool size")
    cuda_graph_max_bs: int | None = Field(None, ge=0)
    schedule_conservativeness: float = Field(1.0, gt=0)
    new_token_ratio_min_factor: float = Field(0.14, gt=0)
    new_token_ratio_decay_steps: int = Field(600, ge=1)
    retract_decode_steps: int = Field(20, ge=1)
    clip_max_new_tokens: int = Field(4096, ge=1)
    preemption_victim: PreemptionVictim = Field(
        "fewest_decoded",
        description="which running request is retracted (simulator.schedulers.victims); fewest_decoded is SGLang's")
    disable_overlap_schedule: bool = False
    disable_radix_cache: bool = False
    page_size: int = Field(1, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    attention_backend: str | None = Field(None, description="None: torch_native on a CPU, flashinfer on CUDA")
    forward_stream: Literal["device", "inline"] | None = Field(
        None, description="where the overlap scheduler's forward runs. device: on a device stream, beside the "
                          "scheduling of the next batch (CUDA); inline: on the scheduler's own thread (a CPU, "
                          "where streams are no-ops), so a batch's results are processed — tokens streamed, "
                          "finished requests reported — only after the next batch's forward. None: by device")


EngineConfig = VllmV0Config | VllmV1Config | SglangConfig
