"""The simulator's clock: one engine step's duration from its batch composition.

Roofline form (docs/cost-model.md): for prefill chunks i (q_i new tokens after cache hits, c_i tokens
already in KV) and decodes j (context c_j),

    T_new = Σq_i + |D|            S = |D| + #prefills that finish (sample) this step
    F     = 2·N_lin·T_new + 2·N_lm·S + κ_attn·A·[Σ(q_i·c_i + q_i(q_i+1)/2) + Σ(c_j + 1)]
    M     = W + κ_kv·KV·(Σc_i + Σc_j) + KV·T_new
    T     = overhead + per_seq·#seqs + per_prefill_seq·#prefills + per_prefill_token·Σ(c_i+q_i)
            + sqrt((F/(η_c·P))² + (M/(η_b·BW))²)
            (+ all-reduce under TP; per_prefill_token is host-side work per token of each prefilled sequence)

An attention backend that attends a prefill chunk as if its whole sequence were new (SGLang's
``torch_native`` backend, its path on a CPU without its AMX kernels: each request's query is padded to
the full KV length and run through causal SDPA) pays Σ(c_i+q_i)(c_i+q_i+1)/2 pairs instead; the linear
layers still see only q_i tokens, so a prefix hit saves those but not the attention.

κ_attn (1 unless fitted) is attention's cost per FLOP relative to the linear layers' (a GPU's fused
attention kernels run near the GEMM efficiency; SDPA on a CPU does not).

F and M are divided by the tensor-parallel degree; each layer adds two ring all-reduces of the
activations. The overhead is the engine family's CUDA-graph step time for pure-decode batches within
the graph limit and its eager step time otherwise.

A pure-decode step is then multiplied by the family's ``decode_scale`` (1 unless measured): how much
slower one engine instance's decode steps run under serving load than its probes said, measured on a
calibration trace (``calibrate.decode_load``; docs/cost-model.md) — a pure-decode step of one request
by ``decode_scale_lone`` where that was measured apart; a step with prefill by its
``prefill_scale`` (1 unless measured): the same for prefill steps, from an engine's own step log
(``calibrate.step_log.prefill_scale``).
"""

from __future__ import annotations

import math

from simulator.profiles import HardwareProfile, ModelProfile, Overheads

WHOLE_SEQUENCE_EXTEND_BACKENDS = ("torch_native",)


def extends_whole_sequence(attention_backend: object) -> bool:
    """Whether an attention backend attends a prefill chunk over its whole sequence (see above)."""
    return attention_backend in WHOLE_SEQUENCE_EXTEND_BACKENDS


SHAPE_FIELDS = ("prefill_tokens", "prefill_ctx", "prefill_pairs", "prefill_full_pairs", "prefill_seqs",
                "sampling_prefills", "decodes", "decode_ctx", "decode_distinct")


class BatchShape:
    """The sums a step's duration depends on. Schedulers fill this while building a batch (a plain class, as
    ``schedulers.base.Step`` says why)."""

    __slots__ = SHAPE_FIELDS

    def __init__(self, prefill_tokens: int = 0, prefill_ctx: int = 0, prefill_pairs: float = 0.0,
                 prefill_full_pairs: float = 0.0, prefill_seqs: int = 0, sampling_prefills: int = 0,
                 decodes: int = 0, decode_ctx: int = 0, decode_distinct: int = -1):
        self.prefill_tokens = prefill_tokens        # Σ q_i (uncached new tokens actually computed)
        self.prefill_ctx = prefill_ctx              # Σ c_i
        self.prefill_pairs = prefill_pairs          # Σ (q_i·c_i + q_i(q_i+1)/2)
        self.prefill_full_pairs = prefill_full_pairs  # Σ (c_i+q_i)(c_i+q_i+1)/2: as if the whole sequence were new
        self.prefill_seqs = prefill_seqs
        self.sampling_prefills = sampling_prefills  # prefill chunks that complete their prompt (LM head runs)
        self.decodes = decodes                      # |D|
        self.decode_ctx = decode_ctx                # Σ c_j
        self.decode_distinct = decode_distinct      # decodes' context tokens that are distinct KV (-1: none shared)

    def __repr__(self) -> str:
        return "BatchShape(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in SHAPE_FIELDS) + ")"

    def add_prefill(self, q: int, c: int, samples: bool) -> None:
        self.prefill_tokens += q
        self.prefill_ctx += c
        self.prefill_pairs += q * c + q * (q + 1) / 2
        self.prefill_full_pairs += (q + c) * (q + c + 1) / 2
        self.prefill_seqs += 1
        self.sampling_prefills += int(samples)

    def add_decode(self, ctx: int) -> None:
        self.decodes += 1
        self.decode_ctx += ctx

    @property
    def shares_decode_context(self) -> bool:
        """Whether some of the decodes' context is KV that another decode of the step also reads."""
        return 0 <= self.decode_distinct < self.decode_ctx

    @property
    def seqs(self) -> int:
        return self.prefill_seqs + self.decodes

    @property
    def is_pure_decode(self) -> bool:
        return self.prefill_seqs == 0


class StepCost:
    __slots__ = ("compute_s", "memory_s", "comm_s", "overhead_s")

    def __init__(self, compute_s: float, memory_s: float, comm_s: float, overhead_s: float):
        self.compute_s, self.memory_s, self.comm_s, self.overhead_s = compute_s, memory_s, comm_s, overhead_s

    @property
    def total_s(self) -> float:
        return self.overhead_s + self.comm_s + math.hypot(self.compute_s, self.memory_s)


class CostModel:
    """Step-time predictor for one engine family on one hardware profile and model."""

    def __init__(self, hw: HardwareProfile, model: ModelProfile, family: str, tp: int = 1,
                 graph_max_bs: int = 256, extend_full_attention: bool = False):
        self.hw, self.model, self.tp = hw, model, tp
        self.extend_full_attention = extend_full_attention
        self.ovh: Overheads = hw.overhead(family)
        self.graph_max_bs = graph_max_bs
        kv = model.kv_bytes_per_token(1) / tp
        self._flin = 2.0 * model.linear_params / tp * model.dequant_compute_factor
        self._flm = 2.0 * model.lm_head_params / tp
        self._attn = hw.kappa_attn * model.attention_flops_per_pair / tp
        self._w = model.streamed_weight_bytes / tp
        self.eta_compute = hw.eta_compute if self.ovh.eta_compute is None else self.ovh.eta_compute
        self.kappa_kv = hw.kappa_kv if self.ovh.kappa_kv is None else self.ovh.kappa_kv
        self._kv_read = self.kappa_kv * kv
        self._kv_write = kv
        self._fc = 1.0 / (self.eta_compute * hw.peak_flops)
        self._fm = 1.0 / (hw.eta_bandwidth * hw.mem_bandwidth)
        self._ar_bytes = 2.0 * (tp - 1) / tp * model.hidden * model.dtype_bytes if tp > 1 else 0.0

    def cost(self, b: BatchShape) -> StepCost:
        t_new = b.prefill_tokens + b.decodes
        s = b.decodes + b.sampling_prefills
        pairs = b.prefill_full_pairs if self.extend_full_attention else b.prefill_pairs
        dctx = self.decode_context(b)
        flops = self._flin * t_new + self._flm * s + self._attn * (pairs + dctx + b.decodes)
        mem = self._w + self._kv_read * (b.prefill_ctx + dctx) + self._kv_write * t_new
        comm = 0.0
        if self.tp > 1:
            per_ar = self.hw.link_latency_s + self._ar_bytes * t_new / self.hw.link_bandwidth
            comm = 2 * self.model.layers * per_ar
        graph = b.is_pure_decode and b.decodes <= self.graph_max_bs
        ovh = (self.ovh.step_graph_s if graph else self.ovh.step_eager_s) + self.ovh.per_seq_s * b.seqs \
            + self.ovh.per_prefill_seq_s * b.prefill_seqs \
            + self.ovh.per_prefill_token_s * (b.prefill_ctx + b.prefill_tokens)
        return StepCost(flops * self._fc, mem * self._fm, comm, ovh)

    def decode_context(self, b: BatchShape) -> float:
        """Σ c_j as the step pays for it: a context token another decode of the step already read costs
        ``kv_shared_cost`` of a first read (1: no saving)."""
        if b.shares_decode_context:
            return b.decode_distinct + self.hw.kv_shared_cost * (b.decode_ctx - b.decode_distinct)
        return float(b.decode_ctx)

    def decode_step_times(self, n: int, ctx: list[int], distinct: list[int]) -> list[float]:
        """``step_time`` of pure-decode steps of n requests with these Σ contexts and distinct KV tokens: the same
        operations in the same order as one ``step_time`` call per step (bit-identical), its step-independent
        terms computed once."""
        b = BatchShape(decodes=n)
        share = self.hw.kv_shared_cost
        lin = self._flin * n + self._flm * n
        attn, fc, fm, kv_read, w, kv_write = self._attn, self._fc, self._fm, self._kv_read, self._w, self._kv_write * n
        comm = 0.0
        if self.tp > 1:
            per_ar = self.hw.link_latency_s + self._ar_bytes * n / self.hw.link_bandwidth
            comm = 2 * self.model.layers * per_ar
        graph = n <= self.graph_max_bs
        ovh = (self.ovh.step_graph_s if graph else self.ovh.step_eager_s) + self.ovh.per_seq_s * n \
            + self.ovh.per_prefill_seq_s * 0 + self.ovh.per_prefill_token_s * (0 + 0)
        scale = self.scale(b)
        head = ovh + comm
        out: list[float] = []
        for c, d in zip(ctx, distinct, strict=True):
            dctx = d + share * (c - d) if 0 <= d < c else float(c)
            out.append((head + math.hypot((lin + attn * (0.0 + dctx + n)) * fc, (w + kv_read * dctx + kv_write) * fm))
                       * scale)
        return out

    def step_time(self, b: BatchShape) -> float:
        return self.cost(b).total_s * self.scale(b)

    def scale(self, b: BatchShape) -> float:
        """The instance's measured scale of a step: ``prefill_scale`` with prefill, ``decode_scale`` for a
        pure-decode step, ``decode_scale_lone`` (where measured) for a pure-decode step of one request."""
        if not b.is_pure_decode:
            return self.ovh.prefill_scale
        if b.decodes == 1 and self.ovh.decode_scale_lone is not None:
            return self.ovh.decode_scale_lone
        return self.ovh.decode_scale

    @property
    def request_latency(self) -> float:
        """Seconds between a request's arrival and the scheduler seeing it (the front end's per-request
        latency; 0 unless fitted). It adds to the request's TTFT and E2E, not to any step."""
        return self.ovh.request_s

    @property
    def delivery_latency(self) -> float:
        """Seconds between the engine processing a step's results and the client reading its tokens (the
        output path: detokenizer, HTTP stream; 0 unless measured). Every token and the request's completion
        reach the client this much later; no step is longer."""
        return self.ovh.deliver_s

    @property
    def front_end_loop(self) -> tuple[float, float] | None:
        """The front end's event loop as measured — its time on each step's outputs and the spacing of one
        step's streams at the client (s) — or None: the front end is a fixed latency (simulator.front_end)."""
        loop = (self.ovh.front_end_step_s, self.ovh.stream_chunk_s)
        return loop if max(loop) > 0 else None
