"""Production traces in: Mooncake, Qwen-Bailian, Azure, BurstGPT, agent-session and ShareGPT files → seeded
Traces that ``simulate``, ``sweep``, ``compare`` and ``live run`` replay unchanged (``servetwin trace import``)."""

from __future__ import annotations

from pathlib import Path

from foundation.digests import file_sha256
from scenarios.importers.build import ImportOptions, build, check_order, select
from scenarios.importers.readers import BLOCK, READERS
from scenarios.importers.rows import Row, TraceImportError
from scenarios.importers.sharegpt import read_sharegpt
from scenarios.trace import Trace, seal, write_trace

__all__ = ["BLOCK", "FORMATS", "ImportOptions", "Row", "TraceImportError", "import_trace"]
FORMATS = (*READERS, "sharegpt")


def import_trace(path: str | Path, opt: ImportOptions, out: str | Path | None = None) -> Trace:
    """Read, select, build and validate; write atomically to ``out`` if given. Nothing is written on error."""
    from scenarios.validate import CHECKS
    p = Path(path)
    if opt.fmt not in FORMATS:
        raise TraceImportError(p, None, f"unknown format {opt.fmt!r}: expected one of {', '.join(FORMATS)}")
    if not p.is_file():
        raise TraceImportError(p, None, "no such file")
    if opt.fmt == "sharegpt":
        rows = read_sharegpt(p, opt.tokenizer, opt.rate, opt.seed, opt.max_turns)
    else:
        rows = READERS[opt.fmt](p)
    check_order(rows, str(p))
    opt = ImportOptions(**{**opt.__dict__, "source": p.name, "source_sha256": file_sha256(p)})
    trace = build(select(rows, opt), opt, len(rows))
    for check in CHECKS.values():
        check(trace)
    if out is not None:
        write_trace(trace, out, inputs=(p,))
    else:
        seal(trace)                        # digests in memory, as a written trace has them
    return trace
