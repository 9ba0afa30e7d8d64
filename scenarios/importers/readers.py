"""One reader per production trace format (schemas: ``trace-formats.md`` in the reference notes).

- ``mooncake``: JSONL ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (512-token blocks;
  ``len(hash_ids) == ceil(input_length / 512)``, the last block partial with its own id). AIPerf's keys.
- ``bailian``: JSONL ``chat_id``, ``parent_chat_id`` (−1: a root), ``timestamp`` (s), ``input_length``,
  ``output_length``, ``hash_ids`` (16-token blocks); a follow-up's prompt already holds its history.
- ``azure``: CSV ``TIMESTAMP`` (a date-time string, 2023 and 2024 forms), ``ContextTokens``,
  ``GeneratedTokens``; no prefix information.
- ``agent-sessions``: the coding-agent session traces (JSONL, gzip or plain): ``{session_id, turns: [{llm_calls:
  [{timestamp (ISO), duration_ms, tokens: {prompt, completion, ...}}], tool_batches}]}``; no text, no ids.
- ``burstgpt``: CSV ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens`` (0: a failure),
  ``Total tokens``, ``Log Type``; no prefix information.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scenarios.importers.rows import Row, TraceImportError

BLOCK = {"mooncake": 512, "bailian": 16}


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line


def _json(path: Path, n: int, line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise TraceImportError(path, n, f"not a JSON object ({e.msg})") from None
    if not isinstance(obj, dict):
        raise TraceImportError(path, n, "not a JSON object")
    return obj


def _int(path: Path, n: int, obj: dict[str, Any], key: str, low: int = 0) -> int:
    v = obj.get(key)
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        got = "missing" if key not in obj else repr(v)[:30]
        raise TraceImportError(path, n, f"field '{key}' is {got}: expected an integer >= {low}")
    return v


def _num(path: Path, n: int, obj: dict[str, Any], key: str) -> float:
    v = obj.get(key)
    try:
        x = float(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else math.nan
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x < 0:
        got = "missing" if key not in obj else repr(v)[:30]
        raise TraceImportError(path, n, f"field '{key}' is {got}: expected a number of seconds >= 0")
    return x


def _hash_ids(path: Path, n: int, obj: dict[str, Any], input_len: int, block: int) -> tuple[tuple[int, int], ...]:
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                            for i in ids):
        raise TraceImportError(path, n, "field 'hash_ids' must be a list of non-negative integers")
    if len(ids) != -(-input_len // block):
        raise TraceImportError(path, n, f"field 'hash_ids' has {len(ids)} ids for input_length {input_len}: "
                               f"expected ceil({input_len}/{block}) = {-(-input_len // block)}")
    last = input_len - block * (len(ids) - 1)
    return tuple((int(i), block if j < len(ids) - 1 else last) for j, i in enumerate(ids))


def read_mooncake(path: Path) -> list[Row]:
    rows = []
    for n, line in _lines(path):
        o = _json(path, n, line)
        ts = _int(path, n, o, "timestamp")
        inp = _int(path, n, o, "input_length", 1)
        rows.append(Row(n, ts / 1000.0, inp, _int(path, n, o, "output_length", 1),
                        _hash_ids(path, n, o, inp, BLOCK["mooncake"])))
    return rows


def read_bailian(path: Path) -> list[Row]:
    rows = []
    for n, line in _lines(path):
        o = _json(path, n, line)
        inp = _int(path, n, o, "input_length", 1)
        chat = _int(path, n, o, "chat_id")
        parent = o.get("parent_chat_id", -1)
        if not isinstance(parent, int) or isinstance(parent, bool) or parent < -1:
            raise TraceImportError(path, n, f"field 'parent_chat_id' is {parent!r}: expected -1 or a chat_id")
        rows.append(Row(n, _num(path, n, o, "timestamp"), inp, _int(path, n, o, "output_length", 1),
                        _hash_ids(path, n, o, inp, BLOCK["bailian"]), parent=None if parent == -1 else parent,
                        key=chat))
    return rows


def _csv(path: Path, need: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        have = [h.strip() for h in reader.fieldnames or []]
        missing = [k for k in need if k not in have]
        if missing:
            raise TraceImportError(path, 1, f"header lacks column(s) {missing}: expected {list(need)}")
        reader.fieldnames = have
        for row in reader:
            yield reader.line_num, row


def _azure_time(path: Path, n: int, text: str) -> float:
    s = (text or "").strip()
    if "." in s:                        # 2023 files carry 7 fractional digits; datetime takes 6
        head, frac = s.split(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        s = f"{head}.{digits[:6]}{frac[len(digits):]}"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise TraceImportError(path, n, f"field 'TIMESTAMP' is {text!r}: expected a date-time such as "
                               "'2023-11-16 18:17:03.9799600' or '2024-05-10 00:00:00.009930+00:00'") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def read_azure(path: Path) -> list[Row]:
    rows = []
    for n, r in _csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        rows.append(Row(n, _azure_time(path, n, r["TIMESTAMP"]), _int(path, n, r, "ContextTokens", 1),
                        _int(path, n, r, "GeneratedTokens", 1)))
    return rows


def read_burstgpt(path: Path, keep_failures: bool = False, model: str | None = None,
                  log_type: str | None = None) -> list[Row]:
    rows = []
    for n, r in _csv(path, ("Timestamp", "Model", "Request tokens", "Response tokens", "Log Type")):
        if (model and r["Model"].strip() != model) or (log_type and r["Log Type"].strip() != log_type):
            continue
        out = _int(path, n, r, "Response tokens", 0)
        if out == 0 and not keep_failures:
            continue
        rows.append(Row(n, _num(path, n, r, "Timestamp"), _int(path, n, r, "Request tokens", 1), max(out, 1)))
    return rows




def _iso(path: Path, n: int, text: Any, field: str) -> float:
    try:
        dt = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise TraceImportError(path, n, f"field '{field}' is {str(text)[:40]!r}: expected an ISO date-time") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _open_text(path: Path) -> Any:
    import gzip
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


def _truncate(blocks: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    out, left = [], n
    for k, m in blocks:
        if left <= 0:
            break
        out.append((k, min(m, left)))
        left -= m
    return out


COMPACTION = (10_000, 0.30)   # a prompt that falls by >= 30 % from >= 10k tokens: the context was compacted


def _session_calls(path: Path, n: int, session: dict[str, Any]) -> list[tuple[float, float, int, int]]:
    """A session's LLM calls with a prompt, as (start s, end s, prompt tokens, completion tokens), in time order."""
    turns = session.get("turns")
    if not isinstance(turns, list):
        raise TraceImportError(path, n, "field 'turns' must be a list of turns")
    calls = []
    for turn in turns:
        for c in (turn.get("llm_calls") or []) if isinstance(turn, dict) else []:
            tok = c.get("tokens") if isinstance(c, dict) else None
            if not isinstance(tok, dict):
                raise TraceImportError(path, n, "field 'llm_calls[].tokens' must be an object with prompt and "
                                       "completion counts")
            prompt = _int(path, n, tok, "prompt")
            if prompt == 0:
                continue                                # calls without a prompt are skipped, as the analysis does
            start = _iso(path, n, c.get("timestamp"), "llm_calls[].timestamp")
            dur = _num(path, n, c, "duration_ms") / 1000.0
            calls.append((start, start + dur, prompt, max(_int(path, n, tok, "completion"), 1)))
    return sorted(calls)


def read_agent_sessions(path: Path) -> list[Row]:
    """Coding-agent session traces (JSONL, gzip or plain, one session per line): each LLM call is a request,
    issued when the latest call of its session that had finished by its start completes plus the recorded gap
    (tool batches, user idle); a call that overlaps every earlier one starts a graph of its own. A call whose
    prompt grows reuses its predecessor's prompt and completion as its prefix; after a compaction (or any
    shrink) it shares nothing."""
    rows: list[Row] = []
    g = 0
    with _open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            calls = _session_calls(path, n, _json(path, n, line))
            blocks: list[list[tuple[int, int]]] = []
            for j, (start, _end, prompt, completion) in enumerate(calls):
                i = max((k for k in range(j) if calls[k][1] <= start), default=None, key=lambda k: calls[k][1])
                inherited: list[tuple[int, int]] = []
                if i is not None:
                    p_i = calls[i][2]
                    compacted = p_i >= COMPACTION[0] and prompt <= (1 - COMPACTION[1]) * p_i
                    if prompt >= p_i and not compacted:
                        inherited = _truncate(blocks[i] + [(2 * (g + i) + 1, calls[i][3])], prompt)
                have = sum(m for _, m in inherited)
                own = inherited + ([(2 * (g + j), prompt - have)] if prompt > have else [])
                blocks.append(own)
                rows.append(Row(n, start, prompt, completion, tuple(own), key=g + j,
                                parent=None if i is None else g + i,
                                gap_s=None if i is None else max(start - calls[i][1], 0.0)))
            g += len(calls)
    rows.sort(key=lambda r: (r.t_s, r.key))
    return rows


READERS: dict[str, Callable[[Path], list[Row]]] = {
    "mooncake": read_mooncake, "bailian": read_bailian, "azure": read_azure, "burstgpt": read_burstgpt,
    "agent-sessions": read_agent_sessions,
}
