"""Incremental, crash-safe request records for a live run: one JSON line per finished request,
appended and fsynced, so an interrupted run or a failing server loses nothing already received."""

from __future__ import annotations

import json
import os
import queue
import threading
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
    server_prompt_tokens: int = -1      # usage.prompt_tokens as the server counted them (-1: not reported)


class JsonlSink:
    """Appends records from a writer thread (fsync after every batch), so that disk latency never
    stalls the dispatcher's event loop; ``close()`` drains and syncs everything queued."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
        self._q: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="journal", daemon=True)
        self._thread.start()

    def write(self, rec: LiveRequest) -> None:
        self._q.put(json.dumps(asdict(rec), allow_nan=True) + "\n")

    def _drain(self) -> None:
        while True:
            item = self._q.get()
            batch = []
            while item is not None:
                batch.append(item)
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._f.write("".join(batch))
                self._f.flush()
                os.fsync(self._f.fileno())
            if item is None:
                return

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()
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
