"""Turn probe records into (batch shape, measured step time) observations and fit a profile."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.records import RunRecord, read_run
from calibrate.fit import FitResult, Observed, Steps, Window, dump_profile, fit_steps, write_profile
from calibrate.gates import guard
from foundation.errors import ServetwinError
from simulator.cost_model import BatchShape, extends_whole_sequence
from simulator.profiles import load_hardware, load_model

FREE = ("eta_compute", "eta_bandwidth", "kappa_kv", "kappa_attn", "step_graph_s", "step_eager_s", "per_seq_s",
        "per_prefill_token_s")


def shares_kv_reads(family: str) -> bool:
    """Whether the engine's decode attention reads a prefix that several requests share in place, so a
    step pays less for it (``kv_shared_cost`` < 1): vLLM's CPU build does — its attention walks each
    request's block table over the same blocks, 2.2–2.9× faster decodes with a 90 % shared prefix.

    SGLang's CPU path does not: its ``torch_native`` decode gathers each request's KV into a tensor of its
    own, shared or not. Its probes of 8 decodes sharing 1,843 of 2,048 tokens still ran faster than 8
    unshared ones on an idle engine (29 against 40 ms in one study), and fits that freed the coefficient put it
    at 0.53–0.77 — but under the study's traffic the saving is not there: with it, each SGLang run's decode
    scale (live / twin, 36 runs of four studies) sat 0.076 in the log below its instance's mean at
    σ = 0.5 and 0.03–0.04 above it at σ = 0.9, so a scale measured at one sharing ratio misjudged the
    other; fitted without it, −0.009 and +0.029 / −0.020 (docs/studies/twin-3-calibration.md,
    "SGLang's shared prefix")."""
    return family.startswith("vllm")


def shared_decode(o: tuple[Observed, float, str]) -> bool:
    """A decode probe whose requests share a prefix."""
    b = o[0]
    return o[2] == "decode" and isinstance(b, BatchShape) and b.shares_decode_context


def free_params(family: str, batched: bool = False) -> tuple[str, ...]:
    """The coefficients a probe fit frees for an engine family. The front end's per-request latency
    (``request_s``) is separate from step costs only where the front end has cores of its own: vLLM's CPU
    backend binds the model's threads to all cores but one and leaves that one to its API server and
    engine core (its log: ``reserved_cpus``), so per-request work there runs beside the forward — a
    latency. SGLang's CPU path binds its threads to every core (``local_omp_cpuid=0,1`` on two), so its
    tokenizer and detokenizer processes take their per-request work from the forward: engine time, which
    the step overheads carry (measured: each 64-token request injected among 8 decoding streams took
    4–16 ms of their time, its own prefill step included).

    ``per_prefill_seq_s`` (a prefilled request's fixed cost) is freed only where batched probes make it
    separable from a prefill step's: with lone prefills only, the two are one number."""
    extra = ("per_prefill_seq_s",) if batched else ()
    shared = ("kv_shared_cost",) if shares_kv_reads(family) else ()
    return FREE + shared + extra + (("request_s",) if family.startswith("vllm") else ())


MIXED_DECODE_CONTEXT = 300          # the mixed probe's decodes: 256-token prompts, ~50 tokens in


def chunk_budget(cfg: dict[str, Any]) -> int | None:
    """The most prompt tokens one step of this engine prefills (None: a whole prompt in one step), from
    its resolved configuration: vLLM's ``max_num_batched_tokens`` when chunked prefill is on, SGLang's
    ``chunked_prefill_size`` (≤ 0 turns chunking off)."""
    if "chunked_prefill_size" in cfg:
        size = int(cfg.get("chunked_prefill_size") or 0)
        return size if size > 0 else None
    if cfg.get("enable_chunked_prefill") or cfg.get("arg.enable_chunked_prefill"):
        budget = cfg.get("max_num_batched_tokens") or cfg.get("arg.max_num_batched_tokens")
        return int(budget) if budget else None
    return None


def prefill_steps(new: int, hit: int, budget: int | None) -> Steps:
    """A lone prompt's prefill as the engine runs it: one step, or (a chunk budget below its uncached
    tokens) one step per chunk, each over the context the earlier chunks wrote. Probing one engine with
    and without a budget is what separates per-step costs from the front end's per-request latency."""
    per = new if budget is None or budget >= new else budget
    steps: Steps = []
    done = 0
    while done < new:
        k = min(per, new - done)
        b = BatchShape()
        b.add_prefill(k, hit + done, done + k >= new)
        steps.append((1.0, b))
        done += k
    return steps


def batched_steps(new: int, ctx: int, k: int, bs: int) -> Steps:
    """k requests over one cached prefix sent at once to an idle engine, as SGLang's CPU path runs them
    (measured with its scheduler's own step times): the first to reach the scheduler is prefilled alone
    (an idle scheduler polls without pause), the rest, arriving during that forward, in the next batch;
    every token goes out when that batch ends (nothing else to run)."""
    hit = (ctx // bs) * bs
    first, rest = BatchShape(), BatchShape()
    first.add_prefill(new + ctx - hit, hit, True)
    for _ in range(k - 1):
        rest.add_prefill(new + ctx - hit, hit, True)
    return [(1.0, first)] + ([(1.0, rest)] if k > 1 else [])


def _sglang_mixed_window(n: int, c: int, cfg: dict[str, Any]) -> Steps:
    """The steps inside an SGLang mixed probe's window (send → first token): the rest of the decode step
    under way when the prompt arrives (half of one on average), each prefill chunk alone at its own offset
    (decodes wait), and — where the overlap scheduler's forward runs inline (a CPU) — the decode step after
    which the prompt's token is streamed."""
    chunk = chunk_budget(cfg) or n
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
    """vLLM: the average step of a mixed probe's window and how many steps its prompt takes (it batches
    the c decodes with each chunk of the prompt, budget B shared)."""
    b = BatchShape()
    budget = chunk_budget(cfg) or n + c
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
    together: dict[tuple[tuple[str, int, int, int], int], list[tuple[float, float]]] = {}   # batched: (send, first)
    for p in rec.meta["probes"]:
        r = req.loc[p["request_id"]]
        if not bool(r["ok"]):
            continue
        key = (p["kind"], p["new_tokens"], p["context"], p["concurrency"])
        if p["kind"] == "batched":
            together.setdefault((key, int(p["repeat"])), []).append((float(r["send_s"]), float(r["first_token_s"])))
            continue
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
    budget = chunk_budget(cfg)
    for (key, _), sent in together.items():
        if budget is not None and (key[3] - 1) * key[1] > budget:
            continue                            # the rest would not fit one batch: not the shape modelled
        if len(sent) == key[3]:                 # every request of the group answered: its window
            groups.setdefault(key, []).append(max(f for _, f in sent) - min(t for t, _ in sent))
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
        return float(w["window_s"])               # the whole window against its steps
    if p["kind"] == "decode":
        n = int(r["output_tokens"])
        span = float(r["last_token_s"] - r["first_token_s"])
        if n < 4 or span < 0.2 * float(r["last_token_s"] - r["send_s"]):
            return None           # tokens delivered in a burst: the stream does not show the decode steps
        return span / (n - 1)
    return float(r["first_token_s"] - r["send_s"])


def _shape(kind: str, n: int, ctx: int, c: int, bs: int, cfg: dict[str, Any], family: str) -> Observed:
    """What the engine ran for one probe: a Window (send → first token: its steps and the front end's
    latency) for prefill, cached and mixed probes; one decode step for decode probes."""
    if kind == "mixed":
        if family == "sglang":
            return Window(_sglang_mixed_window(n, c, cfg))
        avg, steps = _mixed_shape(n, c, cfg)
        return Window([(float(steps), avg)])
    if kind == "prefill":
        return Window(prefill_steps(n, 0, chunk_budget(cfg)))
    if kind == "cached":
        hit = (ctx // bs) * bs                  # whole cached blocks of the shared part
        return Window(prefill_steps(n + ctx - hit, hit, chunk_budget(cfg)))
    if kind == "batched":
        return Window(batched_steps(n, ctx, c, bs))
    b = BatchShape()
    for _ in range(c):
        b.add_decode(ctx)
    if n > 1:                                   # c contexts sharing their first n tokens (whole blocks)
        hit = (n // bs) * bs
        b.decode_distinct = hit + c * (ctx - hit)
    return b


def fit_probes(paths: Sequence[str | Path], engine_family: str, model: str, base: str,
               out: str | Path, accept_poor_fit: bool = False) -> tuple[FitResult, list[tuple[Observed, float, str]]]:
    """Fit and write the profile; a fit that fails the quality gates (calibrate/gates.py) raises PoorFit and
    writes nothing, unless ``accept_poor_fit`` (then the profile is written with ``fit.poor_fit`` set)."""
    recs = [read_run(p) for p in paths]
    probed = [o for r in recs for o in observations(r, engine_family)]
    # an engine that does not share KV reads prices shared-prefix decodes as unshared: not fitted
    obs = probed if shares_kv_reads(engine_family) else [o for o in probed if not shared_decode(o)]
    full = any(extends_whole_sequence(r.meta.get("engine_config", {}).get("attention_backend")) for r in recs)
    free = free_params(engine_family, batched=any(kind == "batched" for _, _, kind in obs))
    if len(obs) < len(free):
        raise ServetwinError(f"only {len(obs)} usable probe observations; need at least {len(free)}")
    hw, mp = load_hardware(base), load_model(model)
    res = fit_steps(hw, mp, engine_family, [o[0] for o in obs], [o[1] for o in obs], free=free,
                    extend_full_attention=full)
    quality: dict[str, Any] = {"method": "bounded relative least squares on probe step times",
                               "r2": round(res.r2, 4), "mape": round(res.mape, 4), "observations": len(obs),
                               "per_probe_error": [{"kind": k, "measured_s": round(y, 6), "error": round(e, 4)}
                                                   for (_, y, k), e in zip(obs, res.residuals, strict=True)],
                               "probes": [str(p) for p in paths],
                               "attention": "whole-sequence extend (torch_native)" if full else "new tokens only"}
    if res.at_bound:
        quality["at_bound"] = res.at_bound
    if len(obs) < len(probed):
        quality["not_fitted"] = {"shared-prefix decode probes": len(probed) - len(obs),
                                 "why": "the engine's decode does not read a shared prefix in place (kv_shared_cost 1)"}
    guard(quality, [r.meta.get("client_lag") for r in recs], accept_poor_fit, f"the fit of {len(obs)} probe shapes")
    write_profile(hw.path, out, engine_family, res.params, f"fitted by servetwin calibrate fit on {len(obs)} probes",
                  quality)
    _rename(Path(out))
    return res, obs


def _rename(path: Path) -> None:
    import yaml
    data = yaml.safe_load(path.read_text())
    data["name"] = path.stem
    dump_profile(path, data)
