"""Incremental, crash-safe request records for a live run: one JSON line per finished request,
appended and fsynced, so an interrupted run or a failing server loses nothing already received."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LiveRequest:
    request_id: int
    dag_id: int
    role: str
    planned_s: float
    prompt_tokens: int
    max_tokens: int
    send_s: float = float("nan")
    first_token_s: float = float("nan")
    last_token_s: float = float("nan")
    output_tokens: int = 0
    cached_tokens: float = float("nan")
    ok: bool = False
    error: str = ""
    detail: str = ""
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    warmup: bool = False


class JsonlSink:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def write(self, rec: LiveRequest) -> None:
        self._f.write(json.dumps(asdict(rec), allow_nan=True) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line (a line cut short by a crash is skipped)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
