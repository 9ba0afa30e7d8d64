"""The trace validator: the reference study's six checks plus schema and digests.

A trace that fails any check is refused before anything runs: ``validate_trace`` raises TraceError
naming the check and the offending request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from foundation.errors import TraceError
from scenarios.prompts import row_keys
from scenarios.trace import SRC_POOL, SRC_PREFIX, Trace, prefix_digest, read_trace

SIGMA_TOLERANCE = 0.01  # achieved σ within 1 percentage point of the target
FINGERPRINT = 16        # leading suffix tokens that key the distinct-suffix check


def check_schema(t: Trace) -> None:
    n = t.n_requests
    a = t.arrays
    for name in ("role", "arrival_s", "delay_s", "max_tokens"):
        if a[name].shape[0] != n:
            raise TraceError("schema", f"{name} has {a[name].shape[0]} rows, dag has {n}")
    for name, total in (("pred_offsets", a["pred_index"].size), ("seg_offsets", a["segments"].shape[0])):
        o = a[name]
        if o.shape[0] != n + 1 or o[0] != 0 or o[-1] != total or np.any(np.diff(o) < 0):
            raise TraceError("schema", f"{name} is not a valid offsets array for {n} requests")
    if a["segments"].ndim != 2 or a["segments"].shape[1] != 3:
        raise TraceError("schema", "segments must have 3 columns (source, start, length)")
    bad_role = np.flatnonzero((a["role"] < 0) | (a["role"] > 3))
    if bad_role.size:
        raise TraceError("schema", f"role code {a['role'][bad_role[0]]} unknown", int(bad_role[0]))
    counts = t.manifest.get("counts", {})
    if counts and (counts.get("requests") != n or counts.get("dags") != t.n_dags):
        raise TraceError("schema", f"manifest counts {counts.get('dags')} DAGs, {counts.get('requests')} requests; "
                         f"the arrays hold {t.n_dags} and {n}")
    bad_mt = np.flatnonzero(a["max_tokens"] < 1)
    if bad_mt.size:
        raise TraceError("schema", "max_tokens must be ≥ 1", int(bad_mt[0]))
    _check_segments(t)


def _check_segments(t: Trace) -> None:
    segs = t.arrays["segments"]
    if not segs.size:
        return
    src, start, length = segs[:, 0], segs[:, 1], segs[:, 2]
    lim = np.where(src == SRC_PREFIX, t.arrays["prefix"].size, t.arrays["pool"].size)
    bad = np.flatnonzero(((src != SRC_PREFIX) & (src != SRC_POOL)) | (start < 0) | (length < 0)
                         | (start + length > lim))
    if bad.size:
        k = int(bad[0])
        req = int(np.searchsorted(t.arrays["seg_offsets"], k, side="right") - 1)
        raise TraceError("schema", f"segment {k} ({src[k]}, {start[k]}, {length[k]}) points outside its array", req)


def check_prefix(t: Trace) -> None:
    got = prefix_digest(t.arrays["prefix"])
    if got != t.manifest.get("prefix_sha256"):
        raise TraceError("prefix-sha256", f"prefix digest {got[:12]}… differs from the manifest's "
                         f"{str(t.manifest.get('prefix_sha256'))[:12]}…")


def check_sharing(t: Trace) -> None:
    from scenarios.trace import achieved_sharing
    target = float(t.manifest["target_sharing"])
    got = achieved_sharing(t)
    if abs(got - target) > SIGMA_TOLERANCE:
        raise TraceError("sharing", f"achieved σ {got:.4f} is not within {SIGMA_TOLERANCE} of target {target}")
    segs, off = t.arrays["segments"], t.arrays["seg_offsets"]
    K, F = t.prefix_groups, t.shared_prefix_len
    if t.arrays["prefix"].size != F * K:
        raise TraceError("sharing", f"the prefix array holds {t.arrays['prefix'].size} tokens, not "
                         f"{K} prefix group(s) of {F}")
    if F:
        first = segs[off[:-1]]
        bad = np.flatnonzero((first[:, 0] != SRC_PREFIX) | (first[:, 2] != F) | (first[:, 1] % F != 0))
        if bad.size:
            raise TraceError("sharing", "prompt does not start with one whole shared prefix", int(bad[0]))
        _check_groups(t, first[:, 1] // F)


def _check_groups(t: Trace, group: np.ndarray) -> None:
    """Prefix groups: K distinct prefixes, and every request of a DAG starts with its DAG's one."""
    K, F = t.prefix_groups, t.shared_prefix_len
    if K == 1:
        return
    rows = t.arrays["prefix"].reshape(K, F)
    if len(set(row_keys(rows))) < K:
        raise TraceError("prefix-groups", f"the {K} shared prefixes are not all distinct")
    dag = t.arrays["dag"]
    first_of = np.full(int(dag.max()) + 1 if dag.size else 0, -1, dtype=np.int64)
    for i in range(t.n_requests):
        d = int(dag[i])
        if first_of[d] < 0:
            first_of[d] = group[i]
        elif first_of[d] != group[i]:
            raise TraceError("prefix-groups", f"DAG {d} spans prefix groups {first_of[d]} and {group[i]}", i)


def check_suffixes(t: Trace) -> None:
    """The study's generator draws every suffix distinct; an imported production trace keeps the prompts it
    recorded, repeats included (scenarios.importers), so the check applies to generated traces only.

    Exact, and read once: a suffix is keyed by its length and first ``FINGERPRINT`` tokens; only suffixes whose key
    repeats are digested whole (``row_keys``), so the first request equal to an earlier one is found as comparing every
    pair would find it."""
    if t.manifest.get("scenario", {}).get("kind") == "import":
        return
    first: dict[bytes, int] = {}          # fingerprint → the first request with it
    whole: dict[bytes, int] = {}          # whole-suffix digest → the first request with it (repeated fingerprints)
    digested: set[int] = set()
    for i in range(t.n_requests):
        s = t.suffix(i)
        j = first.setdefault(len(s).to_bytes(8, "little") + s[:FINGERPRINT].tobytes(), i)
        if j != i:
            if j not in digested:
                digested.add(j)
                whole.setdefault(row_keys(np.asarray([t.suffix(j)]))[0], j)
            k = whole.setdefault(row_keys(np.asarray([s]))[0], i)
            if k != i:
                raise TraceError("distinct-suffix", f"suffix equals that of request {k}", i)
        if i % 4096 == 4095:
            t.done_reading(i + 1)          # a pool mapped from its file is not held whole (scenarios.pool_map)
    t.done_reading(t.n_requests)


def check_dags(t: Trace) -> None:
    """Every predecessor lies in the same DAG, earlier in the numbering (so the DAG is acyclic and
    every request becomes issuable once its DAG's roots complete)."""
    dag, off, idx = t.arrays["dag"], t.arrays["pred_offsets"], t.arrays["pred_index"]
    if t.n_requests and (dag[0] != 0 or np.any(np.diff(dag) < 0) or np.any(np.diff(dag) > 1)):
        first = int(np.flatnonzero(np.diff(dag) < 0)[0] + 1) if np.any(np.diff(dag) < 0) else 0
        raise TraceError("dag", "DAG ids must be 0.. in request order, contiguous", first)
    req_of = np.repeat(np.arange(t.n_requests), np.diff(off))
    bad = np.flatnonzero((idx < 0) | (idx >= t.n_requests))
    if bad.size:
        raise TraceError("dag", f"predecessor {idx[bad[0]]} does not exist", int(req_of[bad[0]]))
    bad = np.flatnonzero(dag[idx] != dag[req_of])
    if bad.size:
        raise TraceError("dag", f"predecessor {idx[bad[0]]} is in another DAG", int(req_of[bad[0]]))
    bad = np.flatnonzero(idx >= req_of)
    if bad.size:
        raise TraceError("dag", f"predecessor {idx[bad[0]]} does not precede it (cycle or forward edge)",
                         int(req_of[bad[0]]))


def check_arrivals(t: Trace) -> None:
    a, dag = t.arrays["arrival_s"], t.arrays["dag"]
    bad = np.flatnonzero(np.diff(a) < 0)
    if bad.size:
        raise TraceError("arrivals-ordered", f"arrival {a[bad[0] + 1]:.6f} s precedes {a[bad[0]]:.6f} s",
                         int(bad[0] + 1))
    same = np.flatnonzero((np.diff(dag) == 0) & (np.diff(a) != 0))
    if same.size:
        raise TraceError("arrivals-ordered", "requests of one DAG carry different arrival times",
                         int(same[0] + 1))
    if a.size and (a[0] < 0 or not np.all(np.isfinite(a))):
        raise TraceError("arrivals-ordered", "arrival times must be finite and non-negative", 0)


def check_delays(t: Trace) -> None:
    d = t.arrays["delay_s"]
    cap = float(t.manifest["tool_delay_max_s"])
    bad = np.flatnonzero(~np.isfinite(d) | (d < 0) | (d > cap))
    if bad.size:
        raise TraceError("tool-delays", f"delay {float(d[bad[0]])!r} s outside [0, {cap}] s", int(bad[0]))


CHECKS: dict[str, Callable[[Trace], None]] = {
    "schema": check_schema, "prefix-sha256": check_prefix, "sharing": check_sharing,
    "distinct-suffix": check_suffixes, "dag": check_dags, "arrivals-ordered": check_arrivals,
    "tool-delays": check_delays,
}


def validate_trace(trace: Trace | str | Path) -> Trace:
    """Run every check (digests first when reading from disk). Returns the trace; raises TraceError."""
    t = read_trace(trace) if not isinstance(trace, Trace) else trace
    for check in CHECKS.values():
        check(t)
    return t
