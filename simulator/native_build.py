"""Compile the simulator's hot modules with mypyc into simulator/_native (``make native``; simulator/native.py says
when they are used). Needs mypy (the dev extra) and a C compiler; without them it says so and exits 0: the
simulator then runs its sources, only slower.

    python -m simulator.native_build [--check]     # --check: say whether the build matches the sources
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from simulator.native import GROUP, MANIFEST, MODULES, OUT, ROOT, source_hashes, source_of, status


def build() -> str:
    try:
        from mypyc.build import mypycify
        from setuptools import Distribution
    except ImportError as e:                       # pragma: no cover - the dev extra is installed by make
        return f"not built: {e.name} is not installed (pip install -e '.[dev]')"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "not built: no C compiler (cc)"
    hashes = source_hashes()
    os.chdir(ROOT)
    shutil.rmtree(OUT, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [str(source_of(m).relative_to(ROOT)) for m in MODULES]
        exts = mypycify(paths, opt_level="3", group_name=GROUP, target_dir=str(Path(tmp) / "c"))
        dist = Distribution({"name": "servetwin-native", "ext_modules": exts})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib, cmd.build_temp = str(OUT), str(Path(tmp) / "o")   # type: ignore[attr-defined]
        dist.run_command("build_ext")
    MANIFEST.write_text(json.dumps({"suffix": importlib.machinery.EXTENSION_SUFFIXES[0], "sources": hashes},
                                   indent=1, sort_keys=True) + "\n")
    return f"built {len(MODULES)} modules into {OUT.relative_to(ROOT)}"


def main(argv: list[str]) -> int:
    if "--check" in argv:
        import simulator  # noqa: F401  (activates the build if it matches)
        print(json.dumps(status()))
        return 0
    print(f"simulator native: {build()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
