"""Rows read from a production trace file, before they become a Trace (``scenarios.importers.build``).

Every reader returns ``Row``s in file order; a bad line raises ``ImportError_`` naming the file, the line
and the field, with what is accepted (``trace-formats.md`` for each format's schema).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from foundation.errors import SpecError


class TraceImportError(SpecError):
    """A production trace file cannot be imported as it stands (exit 2, nothing written)."""

    def __init__(self, path: str | Path, line: int | None, detail: str):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {detail}")


@dataclass(frozen=True, slots=True)
class Row:
    """One request as the trace records it.

    ``t_s`` is its arrival in seconds from the file's own origin (not yet shifted). ``blocks`` is its prompt as
    (key, tokens) pairs — one token block per key, the same wherever the key appears, a shorter use being a
    prefix of it — or None where the format carries no prefix information (a prompt of its own). ``key`` names
    the row and ``parent`` the row it follows in a session (None: it starts one); ``gap_s`` is the delay between
    the parent's completion and this row's issue (None: the gap between their recorded arrivals)."""

    line: int
    t_s: float
    input_len: int
    output_len: int
    blocks: tuple[tuple[int, int], ...] | None = None
    parent: int | None = None
    key: int | None = None
    gap_s: float | None = None
