"""The trace compiler: scenario + seed → Trace. Deterministic: one numpy SeedSequence stream per layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from foundation.errors import SpecError, TraceError
from scenarios.arrivals import arrival_times
from scenarios.limits import check_size
from scenarios.prompts import TokenSampler, distinct_rows
from scenarios.spec import Prompts, Scenario
from scenarios.tools import draw_delays
from scenarios.topology import ROLE_CAPS, DagShape, choose_shapes
from scenarios.trace import (
    FORMAT_VERSION,
    SRC_POOL,
    SRC_PREFIX,
    Trace,
    achieved_sharing,
    prefix_digest,
    seal,
    write_trace,
)

LAYERS = {"arrivals": 0, "topology": 1, "tools": 2, "prefix": 3, "context": 4, "suffix": 5, "outputs": 6,
          "groups": 7}


def layer_rng(seed: int, layer: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(LAYERS[layer],)))


class _Builder:
    """Accumulates per-request rows while walking the DAGs in arrival order."""

    def __init__(self) -> None:
        self.dag: list[int] = []
        self.role: list[int] = []
        self.arrival: list[float] = []
        self.preds: list[list[int]] = []
        self.tool: list[str | None] = []
        self.history: list[list[int]] = []
        self.own: list[int | None] = []        # own new tokens where not D
        self.reply: list[int | None] = []      # reply tokens carried in later prompts (None: the output)

    def add_dag(self, d: int, t: float, shape: DagShape) -> None:
        base = len(self.dag)
        for j, r in enumerate(shape.roles):
            self.dag.append(d)
            self.role.append(r)
            self.arrival.append(t)
            self.preds.append([base + p for p in shape.preds[j]])
            self.tool.append(shape.tool[j])
            self.history.append([base + h for h in shape.history[j]])
            self.own.append(shape.own[j] if shape.own else None)
            self.reply.append(shape.reply)


def _delays(sc: Scenario, tools: list[str | None]) -> np.ndarray:
    rng = layer_rng(sc.seed, "tools")
    out = np.zeros(len(tools), dtype=np.float64)
    for name in sorted(sc.tools):
        idx = np.asarray([i for i, t in enumerate(tools) if t == name], dtype=np.int64)
        if idx.size:
            out[idx] = draw_delays(sc.tools[name], rng, idx.size)
    return out


def _prompt_arrays(sc: Scenario, b: _Builder, max_tokens: np.ndarray) -> dict[str, np.ndarray]:
    p = sc.prompts
    sampler = TokenSampler(p)
    n, n_dags = len(b.dag), (b.dag[-1] + 1 if b.dag else 0)
    F, D, C = p.F, p.D, p.dag_context_tokens
    K = p.prefix_groups
    prefix = sampler.draw(layer_rng(sc.seed, "prefix"), F * K)
    if K > 1:
        prefix = _distinct_groups(prefix.reshape(K, F), sampler, layer_rng(sc.seed, "prefix")).reshape(-1)
    group = _dag_groups(p, n_dags, layer_rng(sc.seed, "groups"))
    ctx = sampler.draw(layer_rng(sc.seed, "context"), (n_dags, C))
    own = [D if o is None else o for o in b.own]
    W = max([D, *own])                        # rows wider than D only where a first turn is longer
    suffix = distinct_rows(sampler.draw(layer_rng(sc.seed, "suffix"), (n, W)), sampler,
                           layer_rng(sc.seed, "suffix"))
    needs_out = sorted({h for hs in b.history for h in hs})
    carried = {h: int(max_tokens[h]) if b.reply[h] is None else int(b.reply[h] or 0) for h in needs_out}
    out_len = np.asarray([carried[h] for h in needs_out], dtype=np.int64) if needs_out else np.zeros(0, np.int64)
    outs = sampler.draw(layer_rng(sc.seed, "outputs"), int(out_len.sum()))
    suffix_base = n_dags * C
    out_base = suffix_base + n * W
    out_start = dict(zip(needs_out, (out_base + np.concatenate([[0], np.cumsum(out_len)[:-1]])).tolist(),
                         strict=True)) if needs_out else {}
    segs: list[tuple[int, int, int]] = []
    offsets = [0]
    for i in range(n):
        if F:
            segs.append((SRC_PREFIX, int(group[b.dag[i]]) * F, F))
        if C:
            segs.append((SRC_POOL, b.dag[i] * C, C))
        for h in b.history[i]:
            segs.append((SRC_POOL, suffix_base + h * W, own[h]))
            if carried[h]:
                segs.append((SRC_POOL, out_start[h], carried[h]))
        segs.append((SRC_POOL, suffix_base + i * W, own[i]))
        offsets.append(len(segs))
    pool = np.concatenate([ctx.reshape(-1), suffix.reshape(-1), outs]).astype(np.int32)
    return {"prefix": prefix.astype(np.int32), "pool": pool,
            "segments": np.asarray(segs, dtype=np.int64).reshape(-1, 3),
            "seg_offsets": np.asarray(offsets, dtype=np.int64)}


def _distinct_groups(rows: np.ndarray, sampler: TokenSampler, rng: np.random.Generator) -> np.ndarray:
    if rows.shape[1] == 0:
        return rows
    return distinct_rows(rows, sampler, rng)


def _dag_groups(p: Prompts, n_dags: int, rng: np.random.Generator) -> np.ndarray:
    """Each DAG's prefix group: all 0 for one group (no draw, so one-group traces are unchanged);
    otherwise a seeded draw with P(k) ∝ 1/(k+1)^s."""
    K = p.prefix_groups
    if K == 1:
        return np.zeros(n_dags, dtype=np.int64)
    w = 1.0 / np.arange(1, K + 1, dtype=np.float64) ** p.prefix_group_skew
    return rng.choice(K, size=n_dags, p=w / w.sum()).astype(np.int64)


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(lists) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(x) for x in lists])
    idx = np.asarray([v for x in lists for v in x], dtype=np.int32)
    return off, idx


def build_trace(sc: Scenario) -> Trace:
    """Compile a scenario into an in-memory Trace (manifest digests are filled in on write)."""
    check_size(sc)
    times = arrival_times(sc.arrivals, sc.duration_s, layer_rng(sc.seed, "arrivals"))
    if times.size == 0:
        raise SpecError(f"scenario '{sc.name}': no DAG arrives within duration_s={sc.duration_s} "
                        f"at rate {sc.arrivals.rate}; raise one of them")
    shapes = choose_shapes(sc.topology, times.size, layer_rng(sc.seed, "topology"))
    b = _Builder()
    for d, (t, s) in enumerate(zip(times.tolist(), shapes, strict=True)):
        b.add_dag(d, t, s)
    role = np.asarray(b.role, dtype=np.int8)
    caps = np.asarray([sc.outputs.cap(ROLE_CAPS[r]) for r in range(4)], dtype=np.int32)
    max_tokens = caps[role]
    pred_off, pred_idx = _csr(b.preds)
    arrays: dict[str, np.ndarray] = {"dag": np.asarray(b.dag, dtype=np.int32), "role": role,
              "arrival_s": np.asarray(b.arrival, dtype=np.float64), "delay_s": _delays(sc, b.tool),
              "pred_offsets": pred_off, "pred_index": pred_idx, "max_tokens": max_tokens}
    arrays.update(_prompt_arrays(sc, b, max_tokens))
    trace = Trace(manifest={}, arrays=arrays)
    trace.manifest = _manifest(sc, trace, _target_sharing(sc, b))
    return trace


def _manifest(sc: Scenario, trace: Trace, target: float) -> dict:
    role = trace.arrays["role"]
    counts = {name: int((role == r).sum()) for r, name in enumerate(ROLE_CAPS)}
    n_dags = trace.n_dags
    # an unset client leaves the manifest (and so every earlier trace's digest) as it was
    scenario = sc.model_dump(mode="json", exclude={"client"} if sc.client is None else None)
    if sc.client is not None:      # an unset limit leaves the manifest (and so earlier traces' digests) as it was
        scenario["client"] = {k: v for k, v in scenario["client"].items() if v is not None}
    return {
        "format_version": FORMAT_VERSION, "scenario": scenario, "seed": sc.seed,
        "counts": {"dags": n_dags, "requests": trace.n_requests, "roles": counts},
        "prompt_layout": _layout(sc),
        "target_sharing": target, "achieved_sharing": achieved_sharing(trace),
        "offered_load_rps": trace.n_requests / max(n_dags, 1) * _rate(sc),
        "tool_delay_max_s": max(t.max_s for t in sc.tools.values()),
        "prefix_sha256": prefix_digest(trace.arrays["prefix"]),
    }


def _target_sharing(sc: Scenario, b: _Builder) -> float:
    """σ as the spec asks for it: F / (F + D), or — where a chain's first turn has its own length — the mean over
    requests of F / (F + the request's own new tokens)."""
    if all(o is None for o in b.own):
        return sc.prompts.target_sharing
    F, D = sc.prompts.F, sc.prompts.D
    own = np.asarray([D if o is None else o for o in b.own], dtype=np.float64)
    return float(np.mean(F / (F + own)))


def _layout(sc: Scenario) -> dict[str, int]:
    p = sc.prompts
    out = {"prefix_tokens": p.F, "suffix_tokens": p.D, "dag_context_tokens": p.dag_context_tokens}
    if p.prefix_groups > 1:
        out["prefix_groups"] = p.prefix_groups
    return out


def _rate(sc: Scenario) -> float:
    if sc.arrivals.kind == "replay":
        return len(sc.arrivals.times) / sc.duration_s
    return sc.arrivals.rate


def compile_trace(sc: Scenario, out: str | Path | None = None, inputs: tuple[str | Path, ...] = ()) -> Trace:
    """Compile, validate and (if ``out`` is given) write the trace directory atomically. Returns the Trace.

    A scenario whose trace would fail a validator check is refused before anything is written."""
    from scenarios.validate import CHECKS
    trace = build_trace(sc)
    for check in CHECKS.values():
        try:
            check(trace)
        except TraceError as err:
            raise SpecError(f"scenario '{sc.name}': cannot be realised ({err}){_hint(err)}") from None
    if out is not None:
        write_trace(trace, out, inputs)
    else:
        seal(trace)
    return trace


def _hint(err: TraceError) -> str:
    if err.check == "sharing":
        return ("; prompts.sharing σ is realised as a whole number of prefix tokens F = round(σ·L): choose a "
                "longer prompts.length or a σ that a whole F reaches")
    return ""
