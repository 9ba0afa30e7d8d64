"""Hardware and model profiles: YAML files in which every number carries its source.

A number is written ``{value: …, source: "…", basis: datasheet|measured|derived|fitted|assumed}``;
a profile with a number lacking a source is refused. Byte sizes (KV per token, weights) are derived
from the model's dimensions, never typed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.errors import SpecError
from scenarios.yaml_text import load_yaml

HERE = Path(__file__).parent
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
GIB = 1024**3


def _value(node: Any, key: str, where: str) -> Any:
    if not isinstance(node, dict) or "value" not in node:
        raise SpecError(f"{where}: '{key}' must be {{value: …, source: …}}")
    if not str(node.get("source", "")).strip():
        raise SpecError(f"{where}: '{key}' has no source; every number in a profile needs one")
    return node["value"]


def _values(data: dict, where: str, skip: tuple[str, ...]) -> dict[str, Any]:
    return {k: _value(v, k, where) for k, v in data.items() if k not in skip}


def _find(kind: str, name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    q = HERE / kind / f"{name_or_path}.yaml"
    if q.is_file():
        return q
    known = sorted(f.stem for f in (HERE / kind).glob("*.yaml"))
    raise SpecError(f"{kind} profile '{name_or_path}' not found; known: {', '.join(known)} (or a .yaml path)")


def _load(kind: str, name_or_path: str) -> tuple[dict, str]:
    path = _find(kind, name_or_path)
    data = load_yaml(path, f"{kind} profile")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a profile is a mapping")
    return data, str(path)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    dtype: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool
    qkv_bias: bool
    max_context: int
    special_token_start: int
    activation_base_gib: float
    activation_per_token_bytes: float
    non_torch_gib: float
    linear_weight_bits: float = 0.0       # quantised linear layers (AWQ: 4 bits + group scales); 0: dtype
    dequant_compute_factor: float = 1.0   # linear-layer FLOP time x this under on-the-fly dequantisation

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def linear_bytes_per_param(self) -> float:
        return self.linear_weight_bits / 8 if self.linear_weight_bits else float(self.dtype_bytes)

    @property
    def layer_linear_params(self) -> int:
        d, h, kv, hd = self.hidden, self.heads, self.kv_heads, self.head_dim
        attn = d * h * hd + 2 * d * kv * hd + h * hd * d
        bias = (h + 2 * kv) * hd if self.qkv_bias else 0
        return attn + bias + 3 * d * self.ffn

    @property
    def linear_params(self) -> int:
        """N_lin: non-embedding linear parameters (all layers)."""
        return self.layers * self.layer_linear_params

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        norms = self.layers * 2 * self.hidden + self.hidden
        embed = self.vocab * self.hidden
        head = 0 if self.tie_embeddings else self.lm_head_params
        return embed + self.linear_params + norms + head

    @property
    def weight_bytes(self) -> int:
        rest = self.total_params - self.linear_params
        return int(round(self.linear_params * self.linear_bytes_per_param + rest * self.dtype_bytes))

    @property
    def streamed_weight_bytes(self) -> int:
        """W: bytes read per forward pass (linear layers + LM head; the embedding is a gather)."""
        return int(round(self.linear_params * self.linear_bytes_per_param + self.lm_head_params * self.dtype_bytes))

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        kv_heads = max(1, self.kv_heads // tp)
        return 2 * self.layers * kv_heads * self.head_dim * self.dtype_bytes

    @property
    def attention_flops_per_pair(self) -> int:
        """A = 4·L·heads·head_dim FLOPs per (query, key) pair (QKᵀ and PV)."""
        return 4 * self.layers * self.heads * self.head_dim


@dataclass(frozen=True)
class Overheads:
    step_graph_s: float
    step_eager_s: float
    per_seq_s: float
    per_prefill_token_s: float = 0.0   # host-side work per token of each prefilled sequence (its whole length)
    per_prefill_seq_s: float = 0.0   # fixed work per prefilled sequence beyond per_seq_s (fitted only with
    #                                  probes that prefill several requests at once)
    request_s: float = 0.0   # the front end's latency per request (HTTP, input processing, hand-off to the
    #                          scheduler, first token back): it delays the request, it does not lengthen steps
    deliver_s: float = 0.0   # from the engine processing a step's results to the client reading its tokens
    #                          (detokenizer, HTTP stream): it delays every token and the request's dependants
    front_end_step_s: float = 0.0  # the front end's event loop's time on each step's outputs, during which it
    #                                takes no request in (simulator.front_end; 0 with stream_chunk_s 0: the
    #                                front end is the fixed latency request_s)
    stream_chunk_s: float = 0.0   # between consecutive streams of one step reaching the client (simulator.front_end)
    decode_scale: float = 1.0  # pure-decode steps of one engine instance under serving load vs its probes'
    #                            (measured on a calibration trace: ``calibrate.decode_load``; 1: as probed)
    decode_scale_lone: float | None = None  # the same for pure-decode steps of one request, where measured
    #                                         apart from the concurrent ones (None: ``decode_scale``)
    prefill_scale: float = 1.0  # steps with prefill of one engine instance under serving load vs its probes'
    #                             (Σ measured / Σ priced over its logged forwards: ``calibrate.step_log``)
    eta_compute: float | None = None  # this engine family's kernels' compute efficiency, where its prefill path
    #                                   differs from the other family's (None: the profile's eta_compute)
    kappa_kv: float | None = None     # this family's cost of a KV read relative to a weight read, where its
    #                                   attention kernels differ (None: the profile's kappa_kv)


INSTANCE_FIELDS = ("decode_scale", "decode_scale_lone", "prefill_scale", "request_s", "deliver_s",
                   "front_end_step_s", "stream_chunk_s")


@dataclass(frozen=True)
class InstanceCalibration:
    """What one engine instance measured of itself on top of its hardware profile (calibrate.decode_load,
    calibrate.step_log, calibrate.lone_prefill, calibrate.vllm_front_end): the scales of its decode and prefill
    steps under load and its front end's latencies. Stored in a profile's family overheads (a calibrated
    profile file per instance); ``of`` reads it back, ``apply`` puts one on a profile, and a simulated run
    records the one it used (run.json ``calibration``)."""

    family: str
    decode_scale: float = 1.0
    decode_scale_lone: float | None = None
    prefill_scale: float = 1.0
    request_s: float = 0.0
    deliver_s: float = 0.0
    front_end_step_s: float = 0.0
    stream_chunk_s: float = 0.0

    @classmethod
    def of(cls, hw: HardwareProfile, family: str) -> InstanceCalibration:
        o = hw.overhead(family)
        return cls(family, **{k: getattr(o, k) for k in INSTANCE_FIELDS})

    def apply(self, hw: HardwareProfile) -> HardwareProfile:
        ovh = dataclasses.replace(hw.overhead(self.family), **{k: getattr(self, k) for k in INSTANCE_FIELDS})
        return dataclasses.replace(hw, overheads={**hw.overheads, self.family: ovh})

    @property
    def is_identity(self) -> bool:
        """Nothing measured: every scale 1, every latency 0."""
        return self == InstanceCalibration(self.family)


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_cuda_gib: float
    memory_smi_mib: float
    init_used_gib: float
    link_bandwidth: float
    link_latency_s: float
    eta_compute: float
    eta_bandwidth: float
    kappa_kv: float
    overheads: dict[str, Overheads]
    path: str = ""
    kappa_attn: float = 1.0       # attention's cost per FLOP relative to the linear layers' (fitted on CPUs)
    device: str = "cuda"          # "cpu": engines resolve their CPU defaults (no CUDA graphs, CPU kernels)
    kv_shared_cost: float = 1.0   # a decode context token another decode of the step already read, vs a first read
    poor_fit: str = ""            # why its fit failed the quality gates, where written with --accept-poor-fit

    def overhead(self, family: str) -> Overheads:
        if family not in self.overheads:
            raise SpecError(f"hardware profile '{self.name}' has no overheads for engine family '{family}'; "
                            f"it has {sorted(self.overheads)}")
        return self.overheads[family]


def _build(cls: Any, where: str, **vals: Any) -> Any:
    """The profile dataclass, each number checked against its field's type (a finite number, an integer, a
    boolean), so a wrong value is one line naming it instead of an error deep inside the cost model."""
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    missing = [n for n, f in ((f.name, f) for f in dataclasses.fields(cls))
               if n not in vals and f.default is dataclasses.MISSING]
    if missing:
        raise SpecError(f"{where}: '{missing[0]}' is missing; a {cls.__name__} needs {', '.join(fields)}")
    for k, v in vals.items():
        want = fields.get(k)
        if want is None:
            raise SpecError(f"{where}: unknown field {k!r}; accepted: {', '.join(fields)}")
        if v is None and "None" in str(want):
            continue
        ok = {"float | None": isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
              "float": isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
              "int": isinstance(v, int) and not isinstance(v, bool), "bool": isinstance(v, bool),
              "str": isinstance(v, str)}.get(str(want), True)
        if not ok:
            raise SpecError(f"{where}: '{k}' = {v!r:.40}: expected {'a finite number' if want == 'float' else want}")
    return cls(**vals)


def load_model(name_or_path: str) -> ModelProfile:
    data, where = _load("models", name_or_path)
    vals = _values(data, where, ("name", "description", "dtype"))
    if data.get("dtype") not in DTYPE_BYTES:
        raise SpecError(f"{where}: dtype {data.get('dtype')!r}; accepted: {sorted(DTYPE_BYTES)}")
    return _build(ModelProfile, where, name=str(data.get("name", Path(where).stem)), dtype=data["dtype"], **vals)


def _overheads(data: dict, where: str) -> Overheads:
    vals = _values(data, where, ())
    accepted = [f.name for f in dataclasses.fields(Overheads)]
    unknown = sorted(set(vals) - set(accepted))
    if unknown:
        raise SpecError(f"{where}: unknown overhead {unknown[0]!r}; accepted: {', '.join(accepted)}")
    return _build(Overheads, where, **vals)


def load_hardware(name_or_path: str) -> HardwareProfile:
    data, where = _load("hardware", name_or_path)
    cost = data.get("cost") or {}
    if not isinstance(cost, dict) or not isinstance(cost.get("overheads") or {}, dict):
        raise SpecError(f"{where}: 'cost' must be a mapping of numbers with an 'overheads' mapping per engine family")
    vals = _values(data, where, ("name", "description", "cost", "kind", "fit", "device"))
    cvals = _values(cost, where, ("overheads",))
    device = str(data.get("device", "cuda"))
    if device not in ("cuda", "cpu"):
        raise SpecError(f"{where}: device {device!r}; accepted: cuda, cpu")
    ovh = {str(fam): _overheads(o if isinstance(o, dict) else {"?": o}, f"{where} overheads.{fam}")
           for fam, o in (cost.get("overheads") or {}).items()}
    fit: dict[str, Any] = data["fit"] if isinstance(data.get("fit"), dict) else {}
    return _build(HardwareProfile, where, name=str(data.get("name", Path(where).stem)), overheads=ovh, path=where,
                  device=device, poor_fit=str(fit.get("poor_fit") or ""), **vals, **cvals)


def known(kind: str) -> list[str]:
    return sorted(f.stem for f in (HERE / kind).glob("*.yaml"))
