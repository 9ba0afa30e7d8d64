"""Llama decoder layers in plain PyTorch with random weights, and the forward of one engine step over them:
prefill chunks of q new tokens over c cached ones, decodes of one token over ctx cached ones, or both in
one step (a chunked-prefill batch) — the step shapes the simulator's cost model prices.

Written with ``torch.nn.functional`` only (no downloads, no engine kernels), so it runs wherever PyTorch
does. Each layer is what Llama-3's is (transformers' ``LlamaDecoderLayer``): RMSNorm, one fused QKV
projection, rotary embedding, grouped-query attention, output projection, RMSNorm, fused gate/up
projection, SiLU·mul, down projection, two residual adds. What differs from a serving engine, stated:

- attention is ``scaled_dot_product_attention`` over contiguous per-sequence KV (a paged-KV-free layout),
  not vLLM's or SGLang's paged FlashAttention/FlashInfer kernels; a prefill chunk over cached tokens uses a
  lower-right causal bias, decodes attend their whole context;
- the new tokens' K/V are written into preallocated per-sequence buffers (the engine's KV write), the
  cached part is random data already there;
- no CUDA graphs: every step is launched eagerly, so a step's fixed launch cost is in the times (the fit
  carries it as a fixed forward time, apart from the engines' own step overheads).

Imports only PyTorch: this module runs on a device machine that has nothing else of ours installed."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)

from calibrate.gpu_grid import Dims, Step


class Layer:
    """One decoder layer's weights (random, scaled to keep activations bounded)."""

    def __init__(self, d: Dims, device: torch.device, dtype: torch.dtype):
        def w(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, device=device, dtype=dtype).normal_(0.0, 1.0 / math.sqrt(shape[-1]))

        self.d = d
        self.wqkv = w((d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden)
        self.wo = w(d.hidden, d.heads * d.head_dim)
        self.wgu = w(2 * d.ffn, d.hidden)
        self.wdown = w(d.hidden, d.ffn)
        self.norm1 = torch.ones(d.hidden, device=device, dtype=dtype)
        self.norm2 = torch.ones(d.hidden, device=device, dtype=dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight


class Rotary:
    """cos/sin tables up to the longest position a step uses."""

    def __init__(self, d: Dims, max_pos: int, device: torch.device, dtype: torch.dtype):
        inv = 1.0 / (d.rope_theta ** (torch.arange(0, d.head_dim, 2, device=device, dtype=torch.float32) / d.head_dim))
        ang = torch.outer(torch.arange(max_pos, device=device, dtype=torch.float32), inv)
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype)

    def apply(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x: (..., tokens, head_dim), rotated by the tokens' positions (tokens,)."""
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * self.cos[pos] + rot * self.sin[pos]


class StepKV:
    """Per-layer KV buffers for one step shape: each prefill chunk's (1, kv_heads, c + q, head_dim), the
    decodes' (b, kv_heads, ctx + 1, head_dim) per distinct context; the cached part filled at random."""

    def __init__(self, d: Dims, step: Step, device: torch.device, dtype: torch.dtype):
        def buf(n: int, length: int) -> torch.Tensor:
            return torch.empty(n, d.kv_heads, length, d.head_dim, device=device, dtype=dtype).normal_()

        self.prefill = [(buf(1, c + q), buf(1, c + q)) for q, c in step.prefills]
        groups: dict[int, int] = {}
        for ctx in step.decodes:
            groups[ctx] = groups.get(ctx, 0) + 1
        self.decode = [(ctx, n, buf(n, ctx + 1), buf(n, ctx + 1)) for ctx, n in sorted(groups.items())]


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: object = None, causal: bool = False) -> torch.Tensor:
    """Grouped-query attention without copying K/V per query head (``enable_gqa``, PyTorch ≥ 2.5; older
    versions repeat K/V, which a serving kernel does not)."""
    if k.shape[1] == q.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal)  # type: ignore[arg-type]
    try:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal,  # type: ignore[arg-type]
                                              enable_gqa=True)
    except TypeError:
        rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              attn_mask=bias, is_causal=causal)  # type: ignore[arg-type]


def _decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decodes attend their whole context: the query heads that share a KV head are laid out as that head's
    query rows (b, kv_heads, heads / kv_heads, dim), so each KV head is read once, as decode kernels do."""
    n, heads, _, dim = q.shape
    kvh = k.shape[1]
    o = F.scaled_dot_product_attention(q.view(n, kvh, heads // kvh, dim), k, v)
    return o.reshape(n, heads * dim)


def attention(d: Dims, step: Step, qkv: torch.Tensor, kv: StepKV, rope: Rotary) -> torch.Tensor:
    """Each sequence's attention over its KV (the new tokens' K/V written in first); returns (tokens, heads·dim)."""
    from torch.nn.attention.bias import causal_lower_right
    hq, hk = d.heads * d.head_dim, d.kv_heads * d.head_dim
    outs, row = [], 0
    for (q_len, c), (kb, vb) in zip(step.prefills, kv.prefill, strict=True):
        x = qkv[row:row + q_len]
        row += q_len
        pos = torch.arange(c, c + q_len, device=qkv.device)
        q = rope.apply(x[:, :hq].view(q_len, d.heads, d.head_dim).transpose(0, 1), pos).unsqueeze(0)
        kb[0, :, c:] = rope.apply(x[:, hq:hq + hk].view(q_len, d.kv_heads, d.head_dim).transpose(0, 1), pos)
        vb[0, :, c:] = x[:, hq + hk:].view(q_len, d.kv_heads, d.head_dim).transpose(0, 1)
        o = _sdpa(q, kb, vb, bias=causal_lower_right(q_len, c + q_len)) if c else _sdpa(q, kb, vb, causal=True)
        outs.append(o[0].transpose(0, 1).reshape(q_len, hq))
    for ctx, n, kb, vb in kv.decode:
        x = qkv[row:row + n]
        row += n
        pos = torch.full((1,), ctx, device=qkv.device, dtype=torch.long)
        q = rope.apply(x[:, :hq].view(n, d.heads, 1, d.head_dim), pos)
        kb[:, :, ctx:] = rope.apply(x[:, hq:hq + hk].view(n, d.kv_heads, 1, d.head_dim), pos)
        vb[:, :, ctx:] = x[:, hq + hk:].view(n, d.kv_heads, 1, d.head_dim)
        outs.append(_decode_attention(q, kb, vb))
    return torch.cat(outs, 0)


def layer_forward(layer: Layer, step: Step, x: torch.Tensor, kv: StepKV, rope: Rotary) -> torch.Tensor:
    d = layer.d
    h = rms_norm(x, layer.norm1, d.rms_eps)
    x = x + F.linear(attention(d, step, F.linear(h, layer.wqkv), kv, rope), layer.wo)
    h = rms_norm(x, layer.norm2, d.rms_eps)
    g, u = F.linear(h, layer.wgu).chunk(2, -1)
    return x + F.linear(F.silu(g) * u, layer.wdown)


def lm_head(x: torch.Tensor, norm: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The final norm and LM head over the sampled rows (greedy sampling: an argmax)."""
    return F.linear(rms_norm(x, norm, eps), weight).argmax(-1)
