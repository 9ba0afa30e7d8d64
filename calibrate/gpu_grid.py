"""The step shapes a gpu-probe times and the model shapes it builds: plain data, no PyTorch (the fit and the
tests read them where PyTorch is not installed)."""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = ("kind", "q", "c", "b", "ctx", "new_tokens", "sampled", "layers_timed", "model_layers", "layer_s",
           "layer_s_p10", "layer_s_p90", "head_s", "step_s", "repeats")


@dataclass(frozen=True)
class Dims:
    """A Llama model's shapes (the fields of a model profile that a layer's forward depends on)."""

    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layers: int
    rms_eps: float = 1e-5
    rope_theta: float = 500000.0


@dataclass(frozen=True)
class Step:
    """One engine step: prefill chunks (q new tokens over c cached each) and decodes (context each)."""

    prefills: tuple[tuple[int, int], ...] = ()
    decodes: tuple[int, ...] = ()

    @property
    def new_tokens(self) -> int:
        return sum(q for q, _ in self.prefills) + len(self.decodes)

    @property
    def sampled(self) -> int:
        """Rows the LM head runs on: every decode and each prefill chunk that ends its prompt (all do here)."""
        return len(self.prefills) + len(self.decodes)


@dataclass(frozen=True)
class Grid:
    prefill_q: tuple[int, ...]
    prefill_c: tuple[int, ...]
    decode_b: tuple[int, ...]
    decode_ctx: tuple[int, ...]
    mixed: tuple[tuple[int, int, int, int], ...]       # (chunk q, its cached c, decodes b, their ctx)
    max_kv_tokens: int          # decode shapes with b·ctx above this are left out (no engine holds them)
    warmup: int
    repeats: int

    def steps(self) -> list[tuple[str, Step]]:
        out = [("prefill", Step(prefills=((q, c),))) for q in self.prefill_q for c in self.prefill_c]
        out += [("decode", Step(decodes=(ctx,) * b)) for b in self.decode_b for ctx in self.decode_ctx
                if b * ctx <= self.max_kv_tokens]
        out += [("mixed", Step(prefills=((q, c),), decodes=(ctx,) * b)) for q, c, b, ctx in self.mixed]
        return out


# An 8B model on an 80 GB card holds ~490k tokens of KV after its weights (128 KiB per token): 512k caps it.
GRIDS = {
    "gpu": Grid(prefill_q=(128, 512, 1024, 2048, 4096, 8192), prefill_c=(0, 1024, 4096, 12288),
                decode_b=(1, 4, 16, 32, 64, 128, 256), decode_ctx=(512, 2048, 8192, 16384),
                mixed=((512, 0, 16, 2048), (512, 4096, 64, 2048), (2048, 0, 16, 2048), (2048, 4096, 64, 2048),
                       (2048, 0, 128, 1024), (8192, 0, 32, 4096)),
                max_kv_tokens=524288, warmup=3, repeats=10),
    "dry": Grid(prefill_q=(16, 64), prefill_c=(0, 64), decode_b=(1, 4), decode_ctx=(32, 128),
                mixed=((32, 0, 2, 64),), max_kv_tokens=512, warmup=1, repeats=3),
}


def row_keys(kind: str, step: Step) -> dict[str, int | str]:
    """A probe row's shape columns: one prefill chunk (q over c) and b decodes at one context ctx."""
    q, c = step.prefills[0] if step.prefills else (0, 0)
    return {"kind": kind, "q": q, "c": c, "b": len(step.decodes), "ctx": step.decodes[0] if step.decodes else 0,
            "new_tokens": step.new_tokens, "sampled": step.sampled}
