"""The simulator's hot modules compiled to C by mypyc (``make native``, run by the install), loaded in place of their
sources only while they are exactly those sources.

The build (``python -m simulator.native_build``) compiles ``MODULES`` from the same Python files into
``simulator/_native/`` with a manifest of each source's SHA-256 and the interpreter's extension suffix. At import of
``simulator`` (``activate()``), a finder serves those compiled modules if every source still has its recorded hash
and the suffix matches; otherwise, or with ``SERVETWIN_PURE=1``, the sources run as they are. It is all or nothing
(the compiled modules share one library), and the results are the same bytes either way (tests/test_native.py runs
each preset both ways); only the speed differs. An edited source is never shadowed by a stale build.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

MODULES = (
    "simulator.kernels", "simulator.request", "simulator.radix_cache", "simulator.block_table",
    "simulator.block_cache", "simulator.cost_model", "simulator.telemetry", "simulator.fast_forward",
    "simulator.schedulers.base", "simulator.schedulers.sglang", "simulator.schedulers.vllm_v0",
    "simulator.schedulers.vllm_v1", "simulator.schedulers.victims", "simulator.schedulers.policies", "simulator.engine",
    "simulator.routers.tenant_tree",
    "simulator.cluster",
)
GROUP = "servetwin_native"                  # the shared library's module: f"{GROUP}__mypyc"
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "simulator" / "_native"
MANIFEST = OUT / "manifest.json"

_state: dict[str, str] = {"mode": "pure", "why": "not activated"}


def source_of(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def source_hashes() -> dict[str, str]:
    return {m: hashlib.sha256(source_of(m).read_bytes()).hexdigest() for m in MODULES}


def _library_names() -> list[str]:
    return [*MODULES, f"{GROUP}__mypyc"]


class _Finder(importlib.abc.MetaPathFinder):
    """Serves the compiled modules (and their shared library) from OUT by exact name."""

    def __init__(self, files: dict[str, Path]):
        self.files = files

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None) \
            -> importlib.machinery.ModuleSpec | None:
        f = self.files.get(fullname)
        if f is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(f))
        return importlib.util.spec_from_file_location(fullname, f, loader=loader)


def _compiled_files() -> tuple[dict[str, Path] | None, str]:
    if os.environ.get("SERVETWIN_PURE"):
        return None, "SERVETWIN_PURE is set"
    if not MANIFEST.exists():
        return None, "not built (make native)"
    manifest = json.loads(MANIFEST.read_text())
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if manifest.get("suffix") != suffix:
        return None, f"built for {manifest.get('suffix')}, this interpreter loads {suffix}"
    if manifest.get("sources") != source_hashes():
        return None, "a source changed since the build (make native)"
    files = {name: OUT / (name.replace(".", "/") + suffix) for name in _library_names()}
    missing = [n for n, f in files.items() if not f.exists()]
    if missing:
        return None, f"build incomplete: {missing[0]}"
    return files, "built from the current sources"


def activate() -> None:
    """Install the finder if the build matches the sources; called once, before any compiled module is imported."""
    if _state["why"] != "not activated":
        return
    loaded = [m for m in MODULES if m in sys.modules]
    files, why = _compiled_files()
    if files is not None and loaded:
        files, why = None, f"{loaded[0]} was imported before simulator"
    _state["why"] = why
    if files is not None:
        sys.meta_path.insert(0, _Finder(files))
        _state["mode"] = "native"


def status() -> dict[str, str]:
    """{'mode': 'native' | 'pure', 'why': …}: which the simulator runs and why."""
    return dict(_state)
