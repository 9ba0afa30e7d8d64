"""A trace's token pool read from its file through a memory map, and let go of behind the reader.

The pool holds every prompt token that is not a shared prefix: at L = 4,096 and σ = 0.9 about 1.6 KB per request,
1.6 GB for a million requests. Read whole, it would be most of a long simulation's memory although each request's
tokens are read once, when it is issued. Mapped, a page is read in when a prompt first touches it; and once every
request that reads a page has been issued (requests 0..k-1 issued: no request from k on reads below the pool's
low-water mark of k), ``release`` drops the pages below that mark from the process (``MADV_DONTNEED``): they stay in
the file, and a later read maps them in again, so a wrong mark costs time, never a wrong token.

The file is hashed before it is mapped (``read_trace``). A trace file rewritten in place while a run maps it is
not supported (servetwin writes every file to a new name and renames it, which a mapping does not see).
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from foundation.errors import TraceError

RELEASE_BYTES = 16 << 20        # let go of at least this much at a time


def _header(f, name: str) -> tuple[tuple[int, ...], bool, np.dtype]:  # type: ignore[no-untyped-def]
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        return np.lib.format.read_array_header_2_0(f)
    except ValueError as err:
        raise TraceError("schema", f"{name} is not a readable array: {err}") from None


class MappedPool:
    """The pool array of one trace file (read-only) and what of it this process still holds."""

    def __init__(self, path: Path):
        with open(path, "rb") as f:
            shape, fortran, dtype = _header(f, path.name)
            offset = f.tell()
            size = path.stat().st_size
            count = int(np.prod(shape)) if shape else 1
            if fortran or offset + count * dtype.itemsize > size:
                raise TraceError("schema", f"{path.name} is not a readable array: truncated or not C-ordered")
            whole: np.ndarray | None = None
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size and count else None
            except (OSError, ValueError):       # a file system that cannot map files: the pool is read whole
                self._map, whole = None, np.fromfile(f, dtype=dtype, count=count)
        self.offset = offset
        try:
            if whole is not None:
                self.array = whole.reshape(shape)
            elif self._map is not None:
                self.array = np.frombuffer(self._map, dtype=dtype, count=count, offset=offset).reshape(shape)
            else:
                self.array = np.zeros(shape, dtype)
        except ValueError as err:
            raise TraceError("schema", f"{path.name} is not a readable array: {err}") from None
        self.released = 0                   # bytes of the map let go of, from its start, in the current pass
        self.low_water: np.ndarray | None = None

    def release_below(self, token: int) -> None:
        """No reader needs the pool's tokens before ``token`` any more: let go of the whole pages they fill."""
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        end = (self.offset + token * self.array.itemsize) // mmap.PAGESIZE * mmap.PAGESIZE
        if end < self.released:             # another pass from the start (a run after the validator's): its own mark
            self.released = 0
        if end - self.released >= RELEASE_BYTES:
            self._map.madvise(mmap.MADV_DONTNEED, self.released, end - self.released)
            self.released = end


def low_water(segments: np.ndarray, seg_offsets: np.ndarray, pool_src: int, pool_size: int) -> np.ndarray:
    """For k = 0..n, the lowest pool position any request from k on reads (``pool_size`` where none does)."""
    n = seg_offsets.size - 1
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(seg_offsets))
    first = np.full(n + 1, pool_size, dtype=np.int64)
    mine = segments[:, 0] == pool_src if segments.size else np.zeros(0, bool)
    np.minimum.at(first, owner[mine], segments[mine, 1])
    return np.minimum.accumulate(first[::-1])[::-1]
