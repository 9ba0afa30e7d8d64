"""Turn probe records into (batch shape, measured step time) observations and fit a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.records import RunRecord, read_run
from calibrate.fit import FitResult, Observed, Steps, fit_steps, write_profile
from scenarios.errors import ServetwinError
from simulator.cost_model import BatchShape, extends_whole_sequence
from simulator.profiles import load_hardware, load_model

FREE = ("eta_compute", "eta_bandwidth", "kappa_kv", "kappa_attn", "step_graph_s", "step_eager_s", "per_seq_s",
        "per_prefill_token_s", "kv_shared_cost")


MIXED_DECODE_CONTEXT = 300          # the mixed probe's decodes: 256-token prompts, ~50 tokens in


def _sglang_mixed_window(n: int, c: int, cfg: dict[str, Any]) -> Steps:
    """The steps inside an SGLang mixed probe's window (send → first token): the rest of the decode step
    under way when the prompt arrives (half of one on average), each prefill chunk alone at its own offset
    (decodes wait), and — where the overlap scheduler's forward runs inline (a CPU) — the decode step after
    which the prompt's token is streamed."""
    chunk = int(cfg.get("chunked_prefill_size") or n)
    chunk = n if chunk <= 0 else chunk
    dec = BatchShape()
    for _ in range(c):
        dec.add_decode(MIXED_DECODE_CONTEXT)
    parts: Steps = [(0.5, dec)]
    done = 0
    while done < n:
        k = min(chunk, n - done)
        b = BatchShape()
        b.add_prefill(k, done, done + k >= n)
        parts.append((1.0, b))
        done += k
    if str(cfg.get("device", "")) == "cpu" and not cfg.get("disable_overlap_schedule"):
        parts.append((1.0, dec))
    return parts


def _mixed_shape(n: int, c: int, cfg: dict[str, Any]) -> tuple[BatchShape, int]:
    """vLLM: the average step of a mixed probe and how many steps its prompt takes (it batches the c
    decodes with each chunk of the prompt, budget B shared)."""
    b = BatchShape()
    budget = int(cfg.get("max_num_batched_tokens") or cfg.get("arg.max_num_batched_tokens") or n + c)
    per = max(1, budget - c)
    steps = max(1, -(-n // per))
    b.add_prefill(n // steps, n // 2 if steps > 1 else 0, True)
    for _ in range(c):
        b.add_decode(MIXED_DECODE_CONTEXT)
    return b, steps


def observations(rec: RunRecord, family: str = "vllm-v1") -> list[tuple[Observed, float, str]]:
    """(shape — or weighted steps — , seconds, kind) per probe shape: the fastest repeat (whatever disturbs
    a probe — a starved API process, a busy host — only adds time; the model is of the steady cost)."""
    if rec.meta.get("source") != "probe":
        raise ServetwinError(f"{rec.path}: not a probe record (source {rec.meta.get('source')!r})")
    cfg = rec.meta.get("engine_config", {})
    bs = int(cfg.get("block_size") or 16)
    req = rec.requests.set_index("request_id")
    groups: dict[tuple[str, int, int, int], list[float]] = {}
    by_length: dict[tuple[int, int, int], dict[int, list[float]]] = {}  # decode: (shared, ctx, c) → length → E2E
    for p in rec.meta["probes"]:
        r = req.loc[p["request_id"]]
        if not bool(r["ok"]):
            continue
        key = (p["kind"], p["new_tokens"], p["context"], p["concurrency"])
        if p["kind"] == "decode" and p.get("max_tokens", 1) > 1:
            by_length.setdefault((p["new_tokens"], p["context"], p["concurrency"]), {}).setdefault(
                int(p["max_tokens"]), []).append(float(r["last_token_s"] - r["send_s"]))
            continue
        y = _legacy_or_single(p, r, rec, cfg, family)
        if y is not None:
            groups.setdefault(key, []).append(y)
    for (shared, ctx, c), lengths in by_length.items():
        if len(lengths) >= 2:
            lo, hi = min(lengths), max(lengths)
            # the fastest repeat of each length: what disturbs a decode probe only adds time (vLLM's CPU
            # build at short context is bimodal: some repeats take 3-5x, its API process starved)
            y = (min(lengths[hi]) - min(lengths[lo])) / (hi - lo)
            if y > 0:
                groups[("decode", shared, ctx, c)] = [y]
    out = []
    for (kind, n, ctx, c), ys in sorted(groups.items()):
        out.append((_shape(kind, n, ctx, c, bs, cfg, family), min(ys), kind))
    return out


def _legacy_or_single(p: dict[str, Any], r: Any, rec: RunRecord, cfg: dict[str, Any], family: str) -> float | None:
    """One request's observation for prefill, cached and mixed probes (and decode probes recorded
    before the two-length design, from chunk spacing)."""
    if p["kind"] == "mixed":         # the prompt's prefill window spread over its steps
        w = rec.meta.get("mixed_windows", {}).get(str(p["request_id"]))
        if not w or w["window_s"] <= 0:
            return None
        if family == "sglang":
            return float(w["window_s"])           # the whole window against its steps
        _, steps = _mixed_shape(p["new_tokens"], p["concurrency"], cfg)
        return float(w["window_s"]) / steps
    if p["kind"] == "decode":
        n = int(r["output_tokens"])
        span = float(r["last_token_s"] - r["first_token_s"])
        if n < 4 or span < 0.2 * float(r["last_token_s"] - r["send_s"]):
            return None           # tokens delivered in a burst: the stream does not show the decode steps
        return span / (n - 1)
    return float(r["first_token_s"] - r["send_s"])


def _shape(kind: str, n: int, ctx: int, c: int, bs: int, cfg: dict[str, Any], family: str) -> Observed:
    if kind == "mixed" and family == "sglang":
        return _sglang_mixed_window(n, c, cfg)
    b = BatchShape()
    if kind == "prefill":
        b.add_prefill(n, 0, True)
    elif kind == "cached":
        hit = (ctx // bs) * bs                  # whole cached blocks of the shared part
        b.add_prefill(n + ctx - hit, hit, True)
    elif kind == "mixed":
        b, _ = _mixed_shape(n, c, cfg)
    else:
        for _ in range(c):
            b.add_decode(ctx)
        if n > 1:                               # c contexts sharing their first n tokens (whole blocks)
            hit = (n // bs) * bs
            b.decode_distinct = hit + c * (ctx - hit)
    return b


def fit_probes(paths: list[str | Path], engine_family: str, model: str, base: str,
               out: str | Path) -> tuple[FitResult, list[tuple[Observed, float, str]]]:
    recs = [read_run(p) for p in paths]
    obs = [o for r in recs for o in observations(r, engine_family)]
    full = any(extends_whole_sequence(r.meta.get("engine_config", {}).get("attention_backend")) for r in recs)
    if len(obs) < len(FREE):
        raise ServetwinError(f"only {len(obs)} usable probe observations; need at least {len(FREE)}")
    hw, mp = load_hardware(base), load_model(model)
    res = fit_steps(hw, mp, engine_family, [o[0] for o in obs], [o[1] for o in obs], free=FREE,
                    extend_full_attention=full)
    quality: dict[str, Any] = {"method": "bounded relative least squares on probe step times",
                               "r2": round(res.r2, 4), "mape": round(res.mape, 4), "observations": len(obs),
                               "per_probe_error": [{"kind": k, "measured_s": round(y, 6), "error": round(e, 4)}
                                                   for (_, y, k), e in zip(obs, res.residuals, strict=True)],
                               "probes": [str(p) for p in paths],
                               "attention": "whole-sequence extend (torch_native)" if full else "new tokens only"}
    write_profile(hw.path, out, engine_family, res.params, f"fitted by servetwin calibrate fit on {len(obs)} probes",
                  quality)
    _rename(Path(out))
    return res, obs


def _rename(path: Path) -> None:
    import yaml
    data = yaml.safe_load(path.read_text())
    data["name"] = path.stem
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=120))
