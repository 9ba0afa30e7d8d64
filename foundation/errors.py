"""Errors users see: one line each, naming what was wrong, where, and what is accepted."""

from __future__ import annotations


class ServetwinError(Exception):
    """Base class for every error the CLI turns into one line and a non-zero exit."""

    exit_code = 1


class SpecError(ServetwinError):
    """A scenario, grid or override is invalid (exit 2)."""

    exit_code = 2


class TraceError(ServetwinError):
    """A trace failed a validator check or a digest (exit 1)."""

    def __init__(self, check: str, detail: str, request: int | None = None):
        self.check = check
        self.request = request
        where = f" (request {request})" if request is not None else ""
        super().__init__(f"trace check '{check}' failed{where}: {detail}")
