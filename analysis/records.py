"""The RunRecord: one run of one engine configuration on one trace, simulated or live.

A run directory holds ``run.json`` (metadata, resolved configuration, telemetry summary),
``requests.parquet`` (one row per request), ``telemetry.parquet`` (time series as the engine
reports it) and optionally ``chunks.parquet`` (per-chunk timestamps). Times are seconds from the
run's start. The schema is versioned and validated on read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from analysis.redact import redact
from analysis.run_meta import RunMeta
from foundation.digests import file_sha256
from foundation.errors import ServetwinError

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 3          # 2: sealed (digests of every file, of the resolved configuration and of run.json);
READABLE_VERSIONS = (2, 3)  # 3: run.json typed and documented (analysis.run_meta.RunMeta), ``calibration`` added

REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "int64", "dag_id": "int64", "role": "object", "planned_s": "float64",
    "send_s": "float64", "first_token_s": "float64", "last_token_s": "float64",
    "output_tokens": "int64", "prompt_tokens": "int64", "cached_tokens": "float64",
    "ok": "bool", "error": "object",
}
OPTIONAL_REQUEST_COLUMNS: dict[str, str] = {"replica": "int64"}   # where a cluster served the run (-1: none)
TELEMETRY_COLUMNS = ("t_s", "kv_usage", "waiting", "running", "preemptions",
                     "prefix_hit_tokens", "prefix_query_tokens")
CHUNK_COLUMNS = ("request_id", "t_s", "tokens")
RUN_KEYS = ("schema_version", "run_id", "source", "trace_digest", "scenario", "seed", "engine",
            "engine_config", "hardware", "model", "offered_load_rps", "run_window",
            "exclusion", "telemetry_summary", "versions", "digests")


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


META_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "run_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "source": (lambda v: isinstance(v, str), "a string (sim, live, probe)"),
    "trace_digest": (lambda v: isinstance(v, str), "a string"),
    "scenario": (lambda v: isinstance(v, dict), "a mapping (the resolved scenario; empty for probes)"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "engine": (lambda v: isinstance(v, str), "a string"),
    "engine_config": (lambda v: isinstance(v, dict), "a mapping"),
    "hardware": (lambda v: isinstance(v, str), "a string"),
    "model": (lambda v: isinstance(v, str), "a string"),
    "offered_load_rps": (lambda v: _num(v) and not v < 0, "a non-negative number (NaN for probes)"),
    "run_window": (lambda v: isinstance(v, dict) and _num(v.get("duration_s")) and not v["duration_s"] <= 0,
                   "a mapping with a positive duration_s"),
    "exclusion": (lambda v: isinstance(v, dict) and isinstance(v.get("exclude_first_dags", 1), int),
                  "a mapping (exclude_first_dags: an integer)"),
    "telemetry_summary": (lambda v: isinstance(v, dict), "a mapping"),
    "versions": (lambda v: isinstance(v, dict), "a mapping"),
    "digests": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                "a mapping of file → SHA-256"),
}


class RecordError(ServetwinError):
    """A run directory is missing, incomplete, damaged or of another schema (bad input: exit 2)."""

    exit_code = 2


Columns = dict[str, np.ndarray]      # a table as equal-length NumPy arrays, by column name


class _Table:
    """A RunRecord table read as a DataFrame (built from columns on first use) and set as one."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, rec: RunRecord | None, owner: type | None = None) -> Any:
        return self if rec is None else rec._frame(self.name)

    def __set__(self, rec: RunRecord, df: Any) -> None:
        rec._tables[self.name] = df


class RunRecord:
    """A run in memory: ``meta`` is run.json; ``requests``, ``telemetry`` and ``chunks`` are DataFrames. A table
    given as ``Columns`` (the simulator's) stays so until it is asked for as a DataFrame: simulating a run, writing
    it and summarising it (``column``) never import pandas."""

    def __init__(self, meta: dict[str, Any], requests: pd.DataFrame | Columns,
                 telemetry: pd.DataFrame | Columns | None = None, chunks: pd.DataFrame | Columns | None = None,
                 path: Path | None = None):
        self.meta = meta
        self.path = path
        self._tables: dict[str, Any] = {"requests": requests, "telemetry": telemetry, "chunks": chunks}

    def _frame(self, name: str) -> Any:
        t = self._tables[name]
        if isinstance(t, dict) or (t is None and name == "telemetry"):
            import pandas as pd
            t = pd.DataFrame(t) if t is not None else pd.DataFrame(columns=list(TELEMETRY_COLUMNS))
            self._tables[name] = t
        return t

    requests = _Table()           # pd.DataFrame
    telemetry = _Table()          # pd.DataFrame (empty, with TELEMETRY_COLUMNS, when none was given)
    chunks = _Table()             # pd.DataFrame | None

    def column(self, name: str) -> np.ndarray:
        """One column of the requests table as an array, without building a DataFrame."""
        t = self._tables["requests"]
        return np.asarray(t[name]) if isinstance(t, dict) else t[name].to_numpy()

    def __repr__(self) -> str:
        return f"RunRecord(run_id={self.meta.get('run_id')!r}, path={self.path!r})"

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])


def servetwin_version() -> str:
    """The installed distribution's version, as a record states it (read from the package metadata, so the
    layers below the command line never import it)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("servetwin")
    except PackageNotFoundError:
        return "0+unknown"


def default_exclusion() -> dict[str, Any]:
    """The study's rules: warm-up requests are never recorded; the first DAG of a run is excluded."""
    return {"exclude_first_dags": 1, "warmup_requests_discarded": 0}


def _request_schema(present: Any) -> dict[str, str]:
    """The requests table's columns in order with their types: the required ones (refused when missing) and the
    optional ones ``present`` holds."""
    missing = [c for c in REQUEST_COLUMNS if c not in present]
    if missing:
        raise RecordError(f"requests table lacks columns {missing}; needs {list(REQUEST_COLUMNS)}")
    return {**REQUEST_COLUMNS, **{c: t for c, t in OPTIONAL_REQUEST_COLUMNS.items() if c in present}}


def _coerce_requests(df: pd.DataFrame) -> pd.DataFrame:
    cols = _request_schema(df.columns)
    out = df[list(cols)].copy()
    for c, dt in cols.items():
        out[c] = out[c].astype(dt)
    out["error"] = out["error"].fillna("").astype(str)
    out["role"] = out["role"].astype(str)
    return out.reset_index(drop=True)


def write_run(rec: RunRecord, out: str | Path, extra: dict[str, bytes] | None = None,
              inputs: tuple[str | Path, ...] = ()) -> Path:
    """Write atomically and sealed: a complete run directory appears at ``out`` or nothing changes there.

    An existing ``out`` is replaced only when it is a run record; ``extra`` files (a live run's journal) are
    written and sealed with the rest. Secrets in the metadata are redacted before anything is written."""
    from foundation.outputs import staged_dir
    out = Path(out)
    missing = [k for k in RUN_KEYS if k not in rec.meta and k not in ("schema_version", "digests")]
    if missing:
        raise RecordError(f"run metadata lacks {missing}")
    meta = redact({k: v for k, v in rec.meta.items() if k != "digests"})
    with staged_dir(out, "run", inputs) as tmp:
        for name in ("requests", "telemetry", "chunks"):
            _write_table(rec, name, tmp / f"{name}.parquet")
        for name, data in (extra or {}).items():
            (tmp / name).write_bytes(data)
        meta = {"schema_version": SCHEMA_VERSION, **json.loads(json.dumps(meta, default=_json_default))}
        typed_meta({**meta, "digests": {}}, f"{out}/run.json")     # a writer's mistake, before anything lands
        meta["digests"] = {**{f.name: file_sha256(f) for f in sorted(tmp.iterdir()) if f.name != "run.json"},
                           "engine_config": _json_sha(meta["engine_config"]), "run.json": _json_sha(meta)}
        (tmp / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    rec.meta = meta
    rec.path = out
    return out


def _write_table(rec: RunRecord, name: str, path: Path) -> None:
    """A table of the record as Parquet: a DataFrame through pandas, columns straight through pyarrow (in
    ``REQUEST_COLUMNS``' order and types for requests; strings as UTF-8, no pandas metadata)."""
    t = rec._tables[name]
    if t is None and name == "chunks":
        return
    if not isinstance(t, dict):
        df = rec._frame(name)
        (_coerce_requests(df) if name == "requests" else df.reset_index(drop=True)).to_parquet(path, index=False)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq
    if name == "requests":
        cols = {c: np.asarray(t[c]).astype(dt, copy=False) for c, dt in _request_schema(t).items()}
        cols["error"] = np.array(["" if e is None else str(e) for e in cols["error"]], dtype=object)
        cols["role"] = np.array([str(x) for x in cols["role"]], dtype=object)
    else:
        cols = {c: np.asarray(v) for c, v in t.items()}
    pq.write_table(pa.Table.from_arrays([_arrow(v) for v in cols.values()], names=list(cols)), path)


def _arrow(v: np.ndarray) -> Any:
    """A NumPy column as an Arrow array, from its buffers (pyarrow's converters would import pandas):
    int64, float64 (NaN kept), bool (bit-packed) or str (UTF-8 with 32-bit offsets)."""
    import pyarrow as pa
    n = len(v)
    if v.dtype == object:                 # each distinct string encoded once (a run's roles and errors are few)
        index: dict[str, int] = {}
        codes = np.fromiter((index.setdefault(str(x), len(index)) for x in v), np.int32, n)
        data = [w.encode() for w in index]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.array([len(b) for b in data], dtype=np.int32)[codes], out=offsets[1:])
        body = b"".join([data[c] for c in codes.tolist()])     # no dictionary_decode: it loads pyarrow.compute
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(body)])
    if v.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(v, bitorder="little"))])
    kind = {np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64()}[v.dtype]
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(np.ascontiguousarray(v))])


def _json_sha(obj: Any) -> str:
    """SHA-256 of canonical JSON (sorted keys, no spaces); of run.json: every field but ``digests``."""
    if isinstance(obj, dict) and "digests" in obj:
        obj = {k: v for k, v in obj.items() if k != "digests"}
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_run(path: str | Path) -> RunRecord:
    """Read a run directory, verifying its digests: a record that was edited or damaged is refused."""
    import pandas as pd
    import pyarrow as pa
    p = Path(path)
    meta = _read_meta(p)
    _verify(p, meta)
    try:
        req = _coerce_requests(pd.read_parquet(p / "requests.parquet"))
        tel_p = p / "telemetry.parquet"
        tel = pd.read_parquet(tel_p) if tel_p.is_file() else pd.DataFrame(columns=list(TELEMETRY_COLUMNS))
        ch_p = p / "chunks.parquet"
        chunks = pd.read_parquet(ch_p) if ch_p.is_file() else None
    except (OSError, ValueError, TypeError, pa.ArrowException) as err:
        raise RecordError(f"{p}: a table cannot be read ({type(err).__name__}: {_first_line(err)})") from None
    return RunRecord(meta=meta, requests=req, telemetry=tel, chunks=chunks, path=p)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:160]


def _read_meta(p: Path) -> dict[str, Any]:
    if not (p / "run.json").is_file():
        raise RecordError(f"{p}: not a run directory (no run.json)")
    try:
        meta = json.loads((p / "run.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise RecordError(f"{p}/run.json: invalid JSON ({err.msg} at line {err.lineno})") from None
    except (UnicodeDecodeError, RecursionError):
        raise RecordError(f"{p}/run.json: invalid JSON (not UTF-8 text, or nested too deeply)") from None
    if not isinstance(meta, dict):
        raise RecordError(f"{p}/run.json: a JSON object is expected, got {type(meta).__name__}")
    if meta.get("schema_version") not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise RecordError(f"{p}: schema_version {meta.get('schema_version')!r}, this servetwin reads {readable} "
                          "(records before 2 were not sealed; re-run them)")
    missing = [k for k in RUN_KEYS if k not in meta]
    if missing:
        raise RecordError(f"{p}/run.json lacks {missing}")
    for key, (ok, accepted) in META_TYPES.items():
        if not ok(meta[key]):
            shown = repr(meta[key]) if len(repr(meta[key])) <= 40 else repr(meta[key])[:37] + "..."
            raise RecordError(f"{p}/run.json: field '{key}' = {shown}: expected {accepted}")
    typed_meta(meta, f"{p}/run.json")
    return meta


def typed_meta(meta: dict[str, Any], where: str) -> RunMeta:
    """run.json as its typed contract (analysis.run_meta); a field of the wrong type is one line naming it."""
    try:
        return RunMeta.model_validate(meta)
    except ValidationError as err:
        e = err.errors()[0]
        field_name = ".".join(str(x) for x in e["loc"])
        raise RecordError(f"{where}: field '{field_name}': {e['msg']}") from None


def read_meta(path: str | Path) -> dict[str, Any]:
    """A run's run.json, after verifying every digest (cheaper than ``read_run``: no table is parsed)."""
    p = Path(path)
    meta = _read_meta(p)
    _verify(p, meta)
    return meta


def _verify(p: Path, meta: dict[str, Any]) -> None:
    dig = meta["digests"]
    if dig.get("run.json") != _json_sha(meta):
        raise RecordError(f"{p}/run.json: its fields do not match its SHA-256 (edited by hand or by another "
                          "program); re-run the record")
    if dig.get("engine_config") != _json_sha(meta["engine_config"]):
        raise RecordError(f"{p}/run.json: the resolved engine configuration does not match its SHA-256")
    files = {k for k in dig if k not in ("run.json", "engine_config")}
    if "requests.parquet" not in files:
        raise RecordError(f"{p}/run.json: digests name no requests.parquet")
    for name in sorted(files):
        f = p / name
        if not f.is_file():
            raise RecordError(f"{p}: {name} is missing (run.json names it)")
        if file_sha256(f) != dig[name]:
            raise RecordError(f"{p}/{name}: does not match the SHA-256 in run.json (edited, damaged or "
                              "truncated); re-run the record")


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Run directories named directly or found below the given paths, sorted."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if (p / "run.json").is_file():
            found.append(p)
        elif p.is_dir():
            found.extend(sorted(q.parent for q in p.rglob("run.json") if not q.parent.name.startswith(".")))
        else:
            raise RecordError(f"{p}: no such run directory")
    return sorted(set(found))


def load_runs(paths: list[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All requests (with a run_id column) and one row of metadata per run."""
    import pandas as pd
    runs = [read_run(p) for p in find_runs(paths)]
    if not runs:
        raise RecordError(f"no run directories under {[str(p) for p in paths]}")
    reqs = pd.concat([r.requests.assign(run_id=r.run_id) for r in runs], ignore_index=True)
    meta = pd.DataFrame([{**{k: r.meta[k] for k in ("run_id", "source", "engine", "seed", "hardware",
                                                     "model", "offered_load_rps", "trace_digest")},
                          "path": str(r.path)} for r in runs])
    return reqs, meta
