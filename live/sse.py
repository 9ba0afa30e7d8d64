"""Server-sent events of an OpenAI-compatible streaming completion, parsed strictly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any


class MalformedStream(Exception):
    """A data line that is not JSON, or a JSON object without the fields a completion chunk has."""


async def events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any] | None]:
    """Yield each ``data:`` payload as a dict; ``None`` for ``[DONE]``. Comments and blank lines skipped."""
    async for raw in lines:
        line = raw.strip()
        if not line or line.startswith(":"):
            continue
        if not line.startswith("data:"):
            if line.startswith(("event:", "id:", "retry:")):
                continue
            raise MalformedStream(f"unexpected line {line[:60]!r}")
        payload = line[5:].strip()
        if payload == "[DONE]":
            yield None
            return
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            raise MalformedStream(f"data is not JSON: {payload[:60]!r}") from None
        if not isinstance(obj, dict):
            raise MalformedStream("data is not a JSON object")
        if "error" in obj:
            raise MalformedStream(f"error event: {str(obj['error'])[:120]}")
        yield obj


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
