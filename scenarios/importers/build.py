"""Rows of a production trace → a Trace in the project's format (manifest + arrays, validated).

- Arrivals: seconds from the first kept row, divided by ``rate_scale`` (rule G4; equal times keep file order).
- Prompts: one block of tokens per hash id (``tokens``), stored once in the pool; a request's prompt is its
  ids' blocks in order, so prefix reuse is exactly what the trace records. Rows without ids get a prompt of
  their own (σ = 0).
- Sessions (Bailian's ``parent_chat_id``): a follow-up is a dependant of its parent, issued when the parent
  completes plus the recorded gap between their arrivals (the trace records no think time: that gap is an upper
  bound on it); a follow-up whose parent was not kept (window, sample) starts its own session.
- Outputs: ``max_tokens`` = the recorded output length (rule G3: replayed with ``ignore_eos``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from scenarios.importers.rows import Row, TraceImportError
from scenarios.importers.tokens import block_tokens, separate_siblings
from scenarios.trace import FORMAT_VERSION, ROLE_NAMES, SRC_POOL, Trace, prefix_digest

TURN = ROLE_NAMES.index("turn")


@dataclass(frozen=True)
class ImportOptions:
    fmt: str
    seed: int = 0
    window: tuple[float, float] | None = None     # seconds from the first row, before rate scaling
    rate_scale: float = 1.0
    sample: int | None = None
    vocab_high: int = 128000
    vocab_low: int = 0                           # ids below it are the tokenizer's special tokens
    rate: float | None = None                    # sharegpt: conversations per second (the data has no times)
    tokenizer: str | None = None                 # sharegpt: the model's tokenizer, to count tokens
    max_turns: int = 1                           # sharegpt: 1 = vllm bench serve's selection
    max_len: int | None = None                   # drop requests whose prompt + output exceed it (a context)
    source: str = ""
    source_sha256: str = ""


def check_order(rows: list[Row], path: str) -> None:
    for a, b in zip(rows, rows[1:], strict=False):
        if b.t_s < a.t_s:
            raise TraceImportError(path, b.line, f"timestamp {b.t_s:g} s precedes the previous row's {a.t_s:g} s: "
                                   "expected non-decreasing arrival times")


def select(rows: list[Row], opt: ImportOptions) -> list[Row]:
    """Window, then a seeded sample (of sessions where the format has them), in file order."""
    if not rows:
        return rows
    t0 = rows[0].t_s
    if opt.window is not None:
        lo, hi = opt.window
        rows = [r for r in rows if lo <= r.t_s - t0 < hi]
    if opt.max_len is not None:
        rows = [r for r in rows if r.input_len + r.output_len <= opt.max_len]
    if opt.sample is not None and opt.sample < len(rows):
        root = _roots(rows)
        sessions = sorted(set(root))
        if opt.sample < len(sessions):
            pick = set(np.random.default_rng(opt.seed).choice(sessions, opt.sample, replace=False).tolist())
            rows = [r for r, s in zip(rows, root, strict=True) if s in pick]
    return rows


def _roots(rows: list[Row]) -> list[int]:
    """Each row's session: the position of its earliest kept ancestor."""
    at = {r.key: k for k, r in enumerate(rows) if r.key is not None}
    root = list(range(len(rows)))
    for k, r in enumerate(rows):
        p = at.get(r.parent) if r.parent is not None else None
        if p is not None and p < k:
            root[k] = root[p]
    return root


def build(rows: list[Row], opt: ImportOptions, read: int | None = None) -> Trace:
    """``read``: rows in the file before selection (reported beside what was kept)."""
    read = len(rows) if read is None else read
    if not rows:
        raise TraceImportError(opt.source, None, "no request left to import (empty file, window or filters)")
    check_order(rows, opt.source)
    if opt.rate_scale <= 0:
        raise TraceImportError(opt.source, None, f"--rate-scale {opt.rate_scale}: expected a number > 0")
    root = _roots(rows)
    # DAGs in order of their root's arrival; a DAG's requests in file order
    order = sorted(range(len(rows)), key=lambda k: (root[k], k))
    new_index = {k: i for i, k in enumerate(order)}
    t0 = rows[0].t_s
    at = {r.key: k for k, r in enumerate(rows) if r.key is not None}
    dag_of: dict[int, int] = {}
    dag, arrival, delay, preds = [], [], [], []
    for k in order:
        r = rows[k]
        d = dag_of.setdefault(root[k], len(dag_of))
        dag.append(d)
        arrival.append((rows[root[k]].t_s - t0) / opt.rate_scale)
        p = at.get(r.parent) if r.parent is not None else None
        if p is not None and p < k and root[p] == root[k]:
            preds.append([new_index[p]])
            gap = r.gap_s if r.gap_s is not None else max(r.t_s - rows[p].t_s, 0.0)
            delay.append(gap / opt.rate_scale)
        else:
            preds.append([])
            delay.append(0.0)
    kept = [rows[k] for k in order]
    arrays: dict[str, np.ndarray] = {
              "dag": np.asarray(dag, dtype=np.int32), "role": np.full(len(kept), TURN, dtype=np.int8),
              "arrival_s": np.asarray(arrival, dtype=np.float64), "delay_s": np.asarray(delay, dtype=np.float64),
              "max_tokens": np.asarray([r.output_len for r in kept], dtype=np.int32)}
    counts = np.asarray([len(p) for p in preds], dtype=np.int64)
    arrays["pred_offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    arrays["pred_index"] = np.asarray([i for p in preds for i in p], dtype=np.int32)
    prompt, stats = _prompts(kept, opt)
    arrays.update(prompt)
    trace = Trace(manifest={}, arrays=arrays)
    trace.manifest = _manifest(trace, kept, opt, stats, read)
    return trace


def from_prompts(arrivals: list[float], prompts: list[np.ndarray], max_tokens: list[int],
                 opt: ImportOptions) -> Trace:
    """Independent requests with their own token prompts (a server's log of what it served) → a Trace; each
    request is a DAG of its own at its arrival time, its prompt stored as given, so prefix reuse is exactly
    what the requests shared."""
    n = len(prompts)
    if n == 0:
        raise TraceImportError(opt.source, None, "no request to write")
    rows = [Row(k + 1, float(t), int(p.size), int(m)) for k, (t, p, m) in enumerate(
        zip(arrivals, prompts, max_tokens, strict=True))]
    check_order(rows, opt.source)
    lens = np.asarray([p.size for p in prompts], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    arrays: dict[str, np.ndarray] = {
        "dag": np.arange(n, dtype=np.int32), "role": np.full(n, TURN, dtype=np.int8),
        "arrival_s": np.asarray(arrivals, dtype=np.float64), "delay_s": np.zeros(n, dtype=np.float64),
        "max_tokens": np.asarray(max_tokens, dtype=np.int32), "pred_offsets": np.zeros(n + 1, dtype=np.int64),
        "pred_index": np.zeros(0, dtype=np.int32), "seg_offsets": np.arange(n + 1, dtype=np.int64),
        "segments": np.stack([np.full(n, SRC_POOL, np.int64), starts, lens], axis=1),
        "prefix": np.zeros(0, dtype=np.int32),
        "pool": np.concatenate(prompts).astype(np.int32) if lens.sum() else np.zeros(0, np.int32)}
    trace = Trace(manifest={}, arrays=arrays)
    stats = {"infinite_cache_hit_ratio": _shared_prefix_ratio(prompts), "blocks": n}
    trace.manifest = _manifest(trace, rows, opt, stats, n)
    return trace


def _shared_prefix_ratio(prompts: list[np.ndarray]) -> float:
    """Prompt tokens an infinite token-granular cache would hit: each prompt's longest common prefix with any
    earlier one (sorted-neighbour search), over all prompt tokens."""
    total = sum(int(p.size) for p in prompts)
    if not total:
        return 0.0
    seen: list[tuple[int, ...]] = []
    hit = 0
    for p in prompts:
        key = tuple(p.tolist())
        k = bisect.bisect_left(seen, key)
        hit += max((_common(key, seen[j]) for j in (k - 1, k) if 0 <= j < len(seen)), default=0)
        seen.insert(k, key)
    return hit / total


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    m = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:m]) != np.asarray(b[:m]))
    return int(diff[0]) if diff.size else m


def _block_ids(rows: list[Row]) -> tuple[list[list[int]], list[list[int]]]:
    """Each row's block keys and lengths: the trace's blocks, or one key of its own for a row without."""
    keys, lens = [], []
    fresh = -1
    for r in rows:
        if r.blocks is None:
            keys.append([fresh])
            lens.append([r.input_len])
            fresh -= 1
            continue
        keys.append([k for k, _ in r.blocks])
        lens.append([n for _, n in r.blocks])
    return keys, lens


def _prompts(rows: list[Row], opt: ImportOptions) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    keys, lens = _block_ids(rows)
    first_at: dict[int, int] = {}
    longest: dict[int, int] = {}
    parent: dict[int, int] = {}
    seen_len: dict[int, int] = {}
    hit = 0
    for ks, ls in zip(keys, lens, strict=True):
        for j, (k, n) in enumerate(zip(ks, ls, strict=True)):
            hit += min(n, seen_len.get(k, 0))
            first_at.setdefault(k, len(first_at))
            longest[k] = max(longest.get(k, 0), n)
            parent.setdefault(k, ks[j - 1] if j else -(1 << 62))
        for k, n in zip(ks, ls, strict=True):
            seen_len[k] = max(seen_len.get(k, 0), n)
    ids = np.fromiter(first_at, dtype=np.int64, count=len(first_at))
    blen = np.asarray([longest[int(k)] for k in ids], dtype=np.int64)
    salt = np.where(ids < 0, (-ids) + (1 << 40), ids)          # rows without ids: keys of their own
    pool = block_tokens(opt.seed, salt, blen, opt.vocab_high, opt.vocab_low)
    start = np.concatenate([[0], np.cumsum(blen)[:-1]]).astype(np.int64)
    par = np.asarray([parent[int(k)] for k in ids], dtype=np.int64)
    pool[start] = separate_siblings(pool[start], par, opt.vocab_high, opt.vocab_low)
    where = {int(k): int(s) for k, s in zip(ids, start, strict=True)}
    segs: list[tuple[int, int, int]] = []
    offsets = [0]
    for ks, ls in zip(keys, lens, strict=True):
        row: list[list[int]] = []
        for k, n in zip(ks, ls, strict=True):
            s = where[k]
            if row and row[-1][1] + row[-1][2] == s:
                row[-1][2] += n                              # contiguous in the pool: one segment
            else:
                row.append([SRC_POOL, s, n])
        segs.extend((a, b, c) for a, b, c in row)
        offsets.append(len(segs))
    total = sum(r.input_len for r in rows)
    arrays: dict[str, np.ndarray] = {"seg_offsets": np.asarray(offsets, dtype=np.int64),
              "segments": np.asarray(segs, dtype=np.int64).reshape(-1, 3),
              "prefix": np.zeros(0, dtype=np.int32), "pool": pool}
    return arrays, {"infinite_cache_hit_ratio": hit / total if total else 0.0, "blocks": int(ids.size)}


def _manifest(trace: Trace, rows: list[Row], opt: ImportOptions, stats: dict[str, float],
              read: int) -> dict:
    a = trace.arrays
    t = a["arrival_s"] + np.where(np.diff(a["pred_offsets"]) > 0, 0.0, a["delay_s"])
    span = float(max(t.max(), 0.0))
    if opt.window is not None:
        span = max(span, (opt.window[1] - opt.window[0]) / opt.rate_scale) if np.isfinite(opt.window[1]) else span
    duration = span if span > 0 else 1.0
    inp = np.asarray([r.input_len for r in rows])
    out = a["max_tokens"]
    q = (50, 90, 99)
    minute = np.bincount((a["arrival_s"] // 60).astype(np.int64))
    has_ids = any(r.blocks is not None for r in rows)
    return {
        "format_version": FORMAT_VERSION, "seed": opt.seed,
        "scenario": {"name": f"import-{opt.fmt}", "kind": "import", "duration_s": duration,
                     "import": {"format": opt.fmt, "source": opt.source, "source_sha256": opt.source_sha256,
                                "window_s": list(opt.window) if opt.window else None, "rate_scale": opt.rate_scale,
                                "sample": opt.sample, "vocab_high": opt.vocab_high, "vocab_low": opt.vocab_low,
                                "max_len": opt.max_len,
                                "rows_read": read}},
        "counts": {"dags": trace.n_dags, "requests": trace.n_requests,
                   "roles": {name: int(n) for name, n in zip(ROLE_NAMES, np.bincount(a["role"], minlength=4),
                                                              strict=True)}},
        "prompt_layout": {"prefix_tokens": 0, "suffix_tokens": int(round(float(inp.mean()))),
                          "dag_context_tokens": 0},
        "target_sharing": 0.0, "achieved_sharing": 0.0,
        "offered_load_rps": trace.n_requests / duration,
        "tool_delay_max_s": max(float(a["delay_s"].max()), 1.0),
        "prefix_sha256": prefix_digest(a["prefix"]),
        "imported": {
            "prefix_information": has_ids,
            "infinite_cache_hit_ratio": round(float(stats["infinite_cache_hit_ratio"]), 6),
            "sessions": trace.n_dags, "follow_ups": int(a["pred_index"].size), "blocks": stats["blocks"],
            "input_tokens": {f"p{p}": float(np.percentile(inp, p)) for p in q} | {"mean": float(inp.mean()),
                                                                                  "max": int(inp.max())},
            "output_tokens": {f"p{p}": float(np.percentile(out, p)) for p in q} | {"mean": float(out.mean()),
                                                                                   "max": int(out.max())},
            "requests_per_minute": minute.tolist(),
        },
    }
