"""Run every benchmark, each in its own process (so peak-memory figures are per benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

print("# simulator modules:", subprocess.run([sys.executable, "-m", "simulator.native_build", "--check"], cwd=ROOT,
                                            capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)}).stdout,
      end="", flush=True)
for script, args in (("bench_compile.py", []), ("bench_import.py", []), ("bench_simulate.py", ["speed"]),
                     ("bench_simulate.py", ["memory"]),
                     ("bench_dispatch.py", []), ("bench_cluster.py", []),
                     ("bench_grid.py", ["2"]), ("bench_serve.py", []), ("bench_fast_forward.py", []),
                     ("bench_startup.py", [])):
    print(f"# {script} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *args], check=True, cwd=ROOT,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
