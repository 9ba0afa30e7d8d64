"""The Trace: a compiled, seeded workload on disk and in memory.

A trace directory holds ``manifest.json`` and one ``.npy`` file per array. Prompts are stored as
segment references: the run-wide shared prefix once (``prefix.npy``), every other token once in
``pool.npy``, and per request a list of (source, start, length) segments. Requests are numbered
0..n-1 in order of their DAG's arrival; ``request_id`` is that index.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from foundation.digests import file_sha256
from foundation.errors import SpecError, TraceError
from scenarios.manifest import check_manifest
from scenarios.pool_map import MappedPool, low_water

FORMAT_VERSION = 2          # 2: the manifest's own fields are sealed by digests['manifest']
ROLE_NAMES = ("planner", "worker", "aggregator", "turn")
SRC_PREFIX, SRC_POOL = 0, 1

# name -> (dtype, ndim)
ARRAY_SCHEMA: dict[str, tuple[str, int]] = {
    "dag": ("int32", 1),
    "role": ("int8", 1),
    "arrival_s": ("float64", 1),
    "delay_s": ("float64", 1),
    "pred_offsets": ("int64", 1),
    "pred_index": ("int32", 1),
    "max_tokens": ("int32", 1),
    "seg_offsets": ("int64", 1),
    "segments": ("int64", 2),
    "prefix": ("int32", 1),
    "pool": ("int32", 1),
}


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def prefix_digest(prefix: np.ndarray) -> str:
    """SHA-256 over the prefix token ids as little-endian int32."""
    return sha256(np.ascontiguousarray(prefix, dtype="<i4").tobytes())


@dataclass
class Trace:
    """In-memory trace. Arrays are read-only numpy views; ``manifest`` is the parsed manifest.json."""

    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray]
    pool_map: MappedPool | None = field(default=None, repr=False, compare=False)   # read from its file: mapped

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "pool_map": None}      # a copy elsewhere holds the pool's tokens themselves

    def done_reading(self, k: int) -> None:
        """Requests 0..k-1 have read their prompts: where the pool is mapped from its file, the pages no request
        from k on reads leave this process's memory (scenarios.pool_map)."""
        pm = self.pool_map
        if pm is None:
            return
        if pm.low_water is None:
            pm.low_water = low_water(self.arrays["segments"], self.arrays["seg_offsets"], SRC_POOL,
                                     int(self.arrays["pool"].size))
        pm.release_below(int(pm.low_water[k]))

    # --- shape -----------------------------------------------------------------------------------
    @property
    def n_requests(self) -> int:
        return int(self.arrays["dag"].shape[0])

    @property
    def n_dags(self) -> int:
        d = self.arrays["dag"]
        return int(d.max()) + 1 if d.size else 0

    @property
    def seed(self) -> int:
        return int(self.manifest["seed"])

    @property
    def digest(self) -> str:
        """One digest naming the whole trace (over the digests of its arrays and of its manifest)."""
        parts = json.dumps(self.manifest["digests"], sort_keys=True).encode()
        return sha256(parts)[:16]

    @property
    def scenario(self) -> dict[str, Any]:
        return dict(self.manifest["scenario"])

    @property
    def prefix_groups(self) -> int:
        """K: how many distinct shared prefixes the ``prefix`` array holds (each F tokens)."""
        return int(self.manifest.get("prompt_layout", {}).get("prefix_groups", 1))

    @property
    def max_connections(self) -> int | None:
        """The scenario's ``client.max_connections``: requests in flight at most (None: unlimited)."""
        n = (self.manifest["scenario"].get("client") or {}).get("max_connections")
        return int(n) if n is not None else None

    @property
    def max_concurrency(self) -> int | None:
        """The scenario's ``client.max_concurrency``: requests sent at most at once (None: unlimited)."""
        n = (self.manifest["scenario"].get("client") or {}).get("max_concurrency")
        return int(n) if n is not None else None

    @property
    def shared_prefix_len(self) -> int:
        """F: the length of one shared prefix."""
        return int(self.arrays["prefix"].size) // self.prefix_groups

    # --- per request -----------------------------------------------------------------------------
    def prefix_group(self, i: int) -> int:
        """The shared prefix request i starts with (0 where it has none)."""
        src, start, _ = self.segments(i)[0] if self.segments(i).size else (SRC_POOL, 0, 0)
        F = self.shared_prefix_len
        return int(start) // F if src == SRC_PREFIX and F else 0

    def predecessors(self, i: int) -> np.ndarray:
        o = self.arrays["pred_offsets"]
        return self.arrays["pred_index"][o[i]:o[i + 1]]

    def segments(self, i: int) -> np.ndarray:
        o = self.arrays["seg_offsets"]
        return self.arrays["segments"][o[i]:o[i + 1]]

    def segment_rows(self, i: int) -> list[list[int]]:
        """Request i's segments as Python ints, ``[source, start, length]`` each (``segments`` without a NumPy
        scalar per field: what a per-request loop reads)."""
        o = self.arrays["seg_offsets"]
        rows: list[list[int]] = self.arrays["segments"][int(o[i]):int(o[i + 1])].tolist()
        return rows

    def prompt(self, i: int) -> np.ndarray:
        """Token ids of request i's prompt (a fresh int32 array)."""
        return self.prompt_of(self.segment_rows(i))

    def prompt_of(self, rows: list[list[int]]) -> np.ndarray:
        """The prompt a request's ``segment_rows`` spell (for a caller that reads them anyway)."""
        prefix, pool = self.arrays["prefix"], self.arrays["pool"]
        parts = [(prefix if src == SRC_PREFIX else pool)[start:start + length] for src, start, length in rows]
        return np.concatenate(parts).astype(np.int32, copy=False) if parts else np.zeros(0, np.int32)

    def suffix(self, i: int) -> np.ndarray:
        """The request's own unique segment (its last segment)."""
        src, start, length = self.segments(i)[-1]
        base = self.arrays["prefix"] if src == SRC_PREFIX else self.arrays["pool"]
        return base[start:start + length]

    def prompt_lengths(self) -> np.ndarray:
        segs = self.arrays["segments"]
        o = self.arrays["seg_offsets"]
        cum = np.concatenate([[0], np.cumsum(segs[:, 2])]) if segs.size else np.zeros(1, np.int64)
        return (cum[o[1:]] - cum[o[:-1]]).astype(np.int64)

    def role_name(self, i: int) -> str:
        return ROLE_NAMES[int(self.arrays["role"][i])]

    def roots(self) -> np.ndarray:
        o = self.arrays["pred_offsets"]
        return np.flatnonzero(o[1:] == o[:-1])

    def successor_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The dependants of every request in compressed form: request i's are ``index[offsets[i]:offsets[i + 1]]``,
        in request order (``successors`` as two arrays: 16 bytes per request and edge, not a list each)."""
        o, idx = self.arrays["pred_offsets"], self.arrays["pred_index"]
        n = self.n_requests
        owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(o))
        order = np.argsort(idx, kind="stable")
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(idx, minlength=n), out=offsets[1:])
        return offsets, owner[order]

    def successors(self) -> list[list[int]]:
        succ: list[list[int]] = [[] for _ in range(self.n_requests)]
        o, idx = self.arrays["pred_offsets"], self.arrays["pred_index"]
        for i in range(self.n_requests):
            for p in idx[o[i]:o[i + 1]]:
                succ[int(p)].append(i)
        return succ


def achieved_sharing(trace: Trace) -> float:
    """Mean over requests of F / (F + D_r), D_r the request's own suffix length (F its shared prefix's
    length: 0 where the prompt does not start with one)."""
    segs, off = trace.arrays["segments"], trace.arrays["seg_offsets"]
    own = segs[off[1:] - 1, 2].astype(np.float64)
    if not own.size:
        return 0.0
    first = segs[off[:-1]]
    F = np.where(first[:, 0] == SRC_PREFIX, first[:, 2], 0).astype(np.float64)
    return float(np.mean(F / (F + own)))


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 over every manifest field but ``digests`` (canonical JSON: sorted keys, no spaces)."""
    body = {k: v for k, v in manifest.items() if k != "digests"}
    return sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode())


def seal(trace: Trace) -> dict[str, bytes]:
    """Fill in the manifest's digests (every array's and the manifest's own); returns the arrays' bytes."""
    data = {name: npy_bytes(trace.arrays[name]) for name in ARRAY_SCHEMA}
    digests = {name: sha256(b) for name, b in data.items()}
    digests["manifest"] = manifest_digest(trace.manifest)
    trace.manifest["digests"] = digests
    return data


def write_trace(trace: Trace, out: str | Path, inputs: tuple[str | Path, ...] = ()) -> Path:
    """Seal and write atomically (a complete trace appears at ``out`` or nothing changes there).
    Byte-identical for identical inputs."""
    from foundation.outputs import staged_dir
    data = seal(trace)
    with staged_dir(out, "trace", inputs) as tmp:
        for name, b in data.items():
            (tmp / f"{name}.npy").write_bytes(b)
        (tmp / "manifest.json").write_text(json.dumps(trace.manifest, indent=2, sort_keys=True) + "\n")
    return Path(out)


def read_trace(path: str | Path, verify: bool = True) -> Trace:
    """Load a trace directory; with ``verify`` every array's SHA-256 must match the manifest."""
    p = Path(path)
    mpath = p / "manifest.json"
    if not p.exists():
        raise SpecError(f"{p}: no such trace directory")
    if not mpath.is_file():
        raise TraceError("manifest", f"{p} has no manifest.json (is it a trace directory?)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        why = f"{err.msg} at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
        raise TraceError("manifest", f"{mpath}: not valid JSON ({why})") from None
    except RecursionError:
        raise TraceError("manifest", f"{mpath}: not valid JSON (nested too deeply)") from None
    check_manifest(manifest, mpath)
    if manifest["format_version"] != FORMAT_VERSION:
        raise TraceError("manifest", f"{mpath}: format_version {manifest['format_version']!r}; this servetwin "
                         f"reads version {FORMAT_VERSION} (recompile the trace from its scenario)")
    if verify and manifest_digest(manifest) != manifest["digests"].get("manifest"):
        raise TraceError("digest", f"{mpath}: its fields do not match the manifest's own SHA-256 (edited by hand "
                         "or by another program); recompile the trace from its scenario")
    arrays: dict[str, np.ndarray] = {}
    pool: MappedPool | None = None
    for name, (dtype, ndim) in ARRAY_SCHEMA.items():
        f = p / f"{name}.npy"
        if not f.is_file():
            raise TraceError("schema", f"array file {name}.npy is missing")
        if verify and file_sha256(f) != manifest["digests"].get(name):
            raise TraceError("digest", f"{name}.npy does not match the SHA-256 in the manifest "
                             "(edited, swapped or truncated)")
        if name == "pool":
            pool = MappedPool(f)            # read as prompts are issued, not here (scenarios.pool_map)
            arr = pool.array
        else:
            try:
                arr = np.load(f, allow_pickle=False)
            except (ValueError, OSError, EOFError) as err:
                raise TraceError("schema", f"{name}.npy is not a readable array: {err}") from None
        if str(arr.dtype) != dtype or arr.ndim != ndim:
            raise TraceError("schema", f"{name}.npy has dtype {arr.dtype} and {arr.ndim} dims; "
                             f"expected {dtype} with {ndim}")
        arr.setflags(write=False)
        arrays[name] = arr
    return Trace(manifest=manifest, arrays=arrays, pool_map=pool)
