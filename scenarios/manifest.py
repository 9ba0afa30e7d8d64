"""The trace manifest's required fields and their types.

Every field a check, a simulation or a record reads is required, so that deleting one can neither switch a
check off nor end in an internal error: a manifest that lacks one, or holds one of the wrong type, is refused
with one line naming the field and what is accepted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from foundation.errors import TraceError

_NUM = (int, float)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, _NUM) and not isinstance(v, bool) and math.isfinite(v)


# dotted field -> (test, what is accepted)
REQUIRED: dict[str, tuple[Any, str]] = {
    "format_version": (_is_int, "an integer"),
    "seed": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "scenario": (lambda v: isinstance(v, dict), "a mapping (the resolved scenario)"),
    "scenario.name": (lambda v: isinstance(v, str), "a string"),
    "scenario.duration_s": (lambda v: _is_num(v) and v > 0, "a positive number of seconds"),
    "counts.dags": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "counts.requests": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "counts.roles": (lambda v: isinstance(v, dict) and all(_is_int(x) for x in v.values()),
                     "a mapping of role → count"),
    "prompt_layout.prefix_tokens": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "prompt_layout.suffix_tokens": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "prompt_layout.dag_context_tokens": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "target_sharing": (lambda v: _is_num(v) and 0 <= v < 1, "a number in [0, 1)"),
    "achieved_sharing": (lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "offered_load_rps": (lambda v: _is_num(v) and v >= 0, "a non-negative number"),
    "tool_delay_max_s": (lambda v: _is_num(v) and v > 0, "a positive number of seconds"),
    "prefix_sha256": (lambda v: isinstance(v, str) and len(v) == 64, "a SHA-256 hex digest"),
    "digests": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                "a mapping of file → SHA-256"),
}
_MISSING = object()


def _get(m: dict[str, Any], dotted: str) -> Any:
    node: Any = m
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def check_manifest(manifest: Any, where: str | Path) -> None:
    """Raise TraceError('manifest') on the first missing or mistyped required field."""
    if not isinstance(manifest, dict):
        raise TraceError("manifest", f"{where}: a manifest is a JSON object, got {type(manifest).__name__}")
    for field, (ok, accepted) in REQUIRED.items():
        v = _get(manifest, field)
        if v is _MISSING:
            raise TraceError("manifest", f"{where}: field '{field}' is missing (required: {accepted})")
        if not ok(v):
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise TraceError("manifest", f"{where}: field '{field}' = {shown}: expected {accepted}")
