"""Where outputs go, so that nothing the user had is lost.

Every output — a trace, a run, a directory of runs, figures, a report, a profile — is written to a temporary
sibling and renamed into place only when complete, so an interrupted command leaves either the old output or
the new one, never half of one. An existing ``--out`` is replaced only when it is a servetwin output of the
same kind (recognised by what servetwin writes into it); anything else, and an ``--out`` that is or lies
inside one of the command's inputs, is refused with one line before any work starts.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from foundation.errors import ServetwinError

MARKER = ".servetwin-output"          # a JSON file {"kind": …} in directories that hold no manifest of their own
FILE_TAG = "servetwin:"               # files: written on their first line (a YAML comment, an HTML comment)
DIR_KINDS = ("trace", "run", "runs", "figures", "paper", "study", "served", "gpu-probe")
FILE_KINDS = ("report", "profile")


class OutputError(ServetwinError):
    """An output path that would destroy something servetwin did not write, or that cannot be written (exit 2)."""

    exit_code = 2


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _marked(path: Path) -> str | None:
    try:
        kind = json.loads((path / MARKER).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _all_runs(path: Path) -> bool:
    entries = [e for e in path.iterdir() if not e.name.startswith(".")]
    return bool(entries) and all(e.is_dir() and ((e / "run.json").is_file() or _all_runs(e)) for e in entries)


def dir_kind(path: Path) -> str | None:
    """What servetwin wrote this directory as, or None (not servetwin's, or empty)."""
    if (kind := _marked(path)) is not None:
        return kind
    if (path / "manifest.json").is_file() and (path / "prefix.npy").is_file():
        return "trace"
    if (path / "run.json").is_file() and (path / "requests.parquet").is_file():
        return "run"
    if _all_runs(path):
        return "runs"
    return None


def file_kind(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(256).decode("utf-8", "replace")
    except OSError:
        return None
    first = head.splitlines()[0] if head else ""
    return next((kind for kind in FILE_KINDS if f"{FILE_TAG}{kind}" in first), None)


def _inside(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


def check_out(out: str | Path, kind: str, inputs: Iterable[str | Path] = ()) -> Path:
    """Refuse an ``--out`` that is or holds an input, or that holds something other than this kind of output."""
    p = Path(out)
    real = p.resolve()
    for raw in inputs:
        src = Path(raw).resolve()
        if _inside(real, src) or _inside(src, real):
            raise OutputError(f"--out {p}: is, holds or lies inside the input {raw}; choose a path outside it")
    if not p.exists() and not p.is_symlink():
        for parent in p.parents:
            if parent.exists() and not parent.is_dir():
                raise OutputError(f"--out {p}: {parent} is a file, not a directory")
        return p
    if kind in FILE_KINDS:
        if p.is_dir():
            raise OutputError(f"--out {p}: is a directory; a {kind} is written to a file path")
        if file_kind(p) != kind:
            raise OutputError(f"--out {p}: exists and is not a servetwin {kind}; servetwin replaces only its own "
                              "output — choose another path or remove it")
        return p
    if not p.is_dir():
        raise OutputError(f"--out {p}: exists and is a file; give a directory path (new, empty or a servetwin {kind})")
    found = dir_kind(p)
    if found == kind or (found is None and not any(p.iterdir())):
        return p
    what = f"a servetwin {found}" if found else "files servetwin did not write"
    raise OutputError(f"--out {p}: exists and holds {what}; servetwin replaces only a {kind} of its own — choose "
                      "another directory or remove it")


def _fresh_tmp(out: Path, is_dir: bool) -> Path:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if is_dir:
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
            os.chmod(tmp, 0o777 & ~_umask())          # mkdtemp makes it 0700; an output is as any directory
            return tmp
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        os.chmod(name, 0o666 & ~_umask())
        return Path(name)
    except OSError as err:
        raise OutputError(f"--out {out}: cannot write there ({err.strerror or err})") from None


def clear_stale(out: Path) -> None:
    """Remove what a writer killed mid-write left beside ``out`` (never a live run's journal)."""
    if not out.parent.is_dir():
        return
    olds = sorted(out.parent.glob(f".{out.name}.*.old.tmp"))
    if olds and not out.exists():           # killed between moving the old output aside and the new one in
        os.replace(olds[-1], out)
    for stale in out.parent.glob(f".{out.name}.*.tmp"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def _put_in_place(tmp: Path, out: Path) -> None:
    if out.exists():
        old = out.with_name(f".{out.name}.{os.getpid()}.old.tmp")
        os.replace(out, old)
        os.replace(tmp, out)
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    else:
        os.replace(tmp, out)


@contextmanager
def staged_dir(out: str | Path, kind: str, inputs: Iterable[str | Path] = ()) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``out``; when the block completes, it replaces ``out``."""
    p = check_out(out, kind, inputs)
    clear_stale(p)
    tmp = _fresh_tmp(p, is_dir=True)
    try:
        yield tmp
        if kind not in ("trace", "run"):
            (tmp / MARKER).write_text(json.dumps({"kind": kind}) + "\n")
        check_out(p, kind)                    # nothing foreign moved in meanwhile
        _put_in_place(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_file(out: str | Path, text: str, kind: str, inputs: Iterable[str | Path] = ()) -> Path:
    """Write a servetwin file atomically; its first line must carry ``servetwin:<kind>`` (a comment)."""
    if f"{FILE_TAG}{kind}" not in text.split("\n", 1)[0]:
        raise ValueError(f"a {kind} file must name itself on its first line")
    p = check_out(out, kind, inputs)
    tmp = _fresh_tmp(p, is_dir=False)
    try:
        tmp.write_text(text)
        _put_in_place(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def atomic_text(path: Path, text: str) -> Path:
    """A file inside a servetwin output directory, replaced atomically (no kind check: the directory has one)."""
    tmp = _fresh_tmp(path, is_dir=False)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def mark_dir(out: str | Path, kind: str, inputs: Iterable[str | Path] = ()) -> Path:
    """A directory filled over time (a resumable sweep): checked, created and marked as ``kind``."""
    p = check_out(out, kind, inputs)
    try:
        p.mkdir(parents=True, exist_ok=True)
        if _marked(p) != kind:
            (p / MARKER).write_text(json.dumps({"kind": kind}) + "\n")
    except OSError as err:
        raise OutputError(f"--out {p}: cannot write there ({err.strerror or err})") from None
    return p
