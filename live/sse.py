"""Server-sent events of an OpenAI-compatible streaming completion, parsed strictly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any


class MalformedStream(Exception):
    """A data line that is not JSON, or a JSON object without the fields a completion chunk has."""


async def events(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any] | None]:
    """Yield each ``data:`` payload as a dict; ``None`` for ``[DONE]``. Comments and blank lines skipped.

    Reads the raw byte stream and splits lines itself (``\\n``, ``\\r\\n`` or ``\\r``): one async generator per
    stream instead of httpx's four text layers, which matters with hundreds of concurrent streams."""
    buf = b""
    async for data in chunks:
        buf += data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            obj = _event(raw)
            if obj is _SKIP:
                continue
            yield obj
            if obj is None:
                return
    if buf.strip():
        obj = _event(buf)
        if obj is not _SKIP:
            yield obj


_SKIP: Any = object()


def _event(raw: bytes) -> Any:
    """One line → a chunk dict, None for [DONE], or _SKIP; raises MalformedStream."""
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise MalformedStream(f"line is not UTF-8: {raw[:60]!r}") from None
    if not line or line.startswith(":"):
        return _SKIP
    if not line.startswith("data:"):
        if line.startswith(("event:", "id:", "retry:")):
            return _SKIP
        raise MalformedStream(f"unexpected line {line[:60]!r}")
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        raise MalformedStream(f"data is not JSON: {payload[:60]!r}") from None
    if not isinstance(obj, dict):
        raise MalformedStream("data is not a JSON object")
    if "error" in obj:
        raise MalformedStream(f"error event: {str(obj['error'])[:120]}")
    return obj


def chunk_tokens(obj: dict[str, Any]) -> int:
    """Tokens carried by one chunk: ``token_ids`` when the server returns them, else 1 per choice
    with text (both engines stream one token per chunk in this configuration)."""
    n = 0
    for ch in obj.get("choices") or []:
        ids = ch.get("token_ids")
        if isinstance(ids, list) and ids:
            n += len(ids)
        elif ch.get("text") or (ch.get("delta") or {}).get("content"):
            n += 1
    return n
