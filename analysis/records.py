"""The RunRecord: one run of one engine configuration on one trace, simulated or live.

A run directory holds ``run.json`` (metadata, resolved configuration, telemetry summary),
``requests.parquet`` (one row per request), ``telemetry.parquet`` (time series as the engine
reports it) and optionally ``chunks.parquet`` (per-chunk timestamps). Times are seconds from the
run's start. The schema is versioned and validated on read.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scenarios.errors import ServetwinError

SCHEMA_VERSION = 1

REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "int64", "dag_id": "int64", "role": "object", "planned_s": "float64",
    "send_s": "float64", "first_token_s": "float64", "last_token_s": "float64",
    "output_tokens": "int64", "prompt_tokens": "int64", "cached_tokens": "float64",
    "ok": "bool", "error": "object",
}
TELEMETRY_COLUMNS = ("t_s", "kv_usage", "waiting", "running", "preemptions",
                     "prefix_hit_tokens", "prefix_query_tokens")
CHUNK_COLUMNS = ("request_id", "t_s", "tokens")
RUN_KEYS = ("schema_version", "run_id", "source", "trace_digest", "scenario", "seed", "engine",
            "engine_config", "hardware", "model", "offered_load_rps", "run_window",
            "exclusion", "telemetry_summary", "versions")


class RecordError(ServetwinError):
    """A run directory is missing, incomplete or of another schema."""


@dataclass
class RunRecord:
    """A run in memory: ``meta`` is run.json, the rest are DataFrames."""

    meta: dict[str, Any]
    requests: pd.DataFrame
    telemetry: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(TELEMETRY_COLUMNS)))
    chunks: pd.DataFrame | None = None
    path: Path | None = None

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])


def default_exclusion() -> dict[str, Any]:
    """The study's rules: warm-up requests are never recorded; the first DAG of a run is excluded."""
    return {"exclude_first_dags": 1, "warmup_requests_discarded": 0}


def _coerce_requests(df: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in REQUEST_COLUMNS if c not in df.columns]
    if missing:
        raise RecordError(f"requests table lacks columns {missing}; needs {list(REQUEST_COLUMNS)}")
    out = df[list(REQUEST_COLUMNS)].copy()
    for c, dt in REQUEST_COLUMNS.items():
        out[c] = out[c].astype(dt)
    out["error"] = out["error"].fillna("").astype(str)
    out["role"] = out["role"].astype(str)
    return out.reset_index(drop=True)


def write_run(rec: RunRecord, out: str | Path) -> Path:
    """Write atomically: a complete run directory appears at ``out`` or nothing does."""
    out = Path(out)
    missing = [k for k in RUN_KEYS if k not in rec.meta and k != "schema_version"]
    if missing:
        raise RecordError(f"run metadata lacks {missing}")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.*"):      # left by a writer killed mid-write
        if stale.is_dir() and not stale.name.endswith(".live"):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        meta = {"schema_version": SCHEMA_VERSION, **rec.meta}
        _coerce_requests(rec.requests).to_parquet(tmp / "requests.parquet", index=False)
        rec.telemetry.reset_index(drop=True).to_parquet(tmp / "telemetry.parquet", index=False)
        if rec.chunks is not None:
            rec.chunks.reset_index(drop=True).to_parquet(tmp / "chunks.parquet", index=False)
        (tmp / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=_json_default) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


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
    p = Path(path)
    if not (p / "run.json").is_file():
        raise RecordError(f"{p}: not a run directory (no run.json)")
    try:
        meta = json.loads((p / "run.json").read_text())
    except json.JSONDecodeError as err:
        raise RecordError(f"{p}/run.json: invalid JSON ({err.msg})") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(f"{p}: schema_version {meta.get('schema_version')!r}, this servetwin reads "
                          f"{SCHEMA_VERSION}")
    missing = [k for k in RUN_KEYS if k not in meta]
    if missing:
        raise RecordError(f"{p}/run.json lacks {missing}")
    if not (p / "requests.parquet").is_file():
        raise RecordError(f"{p}: requests.parquet is missing")
    req = _coerce_requests(pd.read_parquet(p / "requests.parquet"))
    tel_p = p / "telemetry.parquet"
    tel = pd.read_parquet(tel_p) if tel_p.is_file() else pd.DataFrame(columns=list(TELEMETRY_COLUMNS))
    ch_p = p / "chunks.parquet"
    chunks = pd.read_parquet(ch_p) if ch_p.is_file() else None
    return RunRecord(meta=meta, requests=req, telemetry=tel, chunks=chunks, path=p)


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
    runs = [read_run(p) for p in find_runs(paths)]
    if not runs:
        raise RecordError(f"no run directories under {[str(p) for p in paths]}")
    reqs = pd.concat([r.requests.assign(run_id=r.run_id) for r in runs], ignore_index=True)
    meta = pd.DataFrame([{**{k: r.meta[k] for k in ("run_id", "source", "engine", "seed", "hardware",
                                                     "model", "offered_load_rps", "trace_digest")},
                          "path": str(r.path)} for r in runs])
    return reqs, meta
