"""Benchmark: how long `servetwin simulate` takes to start. Two figures, median of 5 fresh processes each:
the imports the simulate path needs (``python -X importtime``: the cumulative time of the top-level imports until
the simulation can begin) and the whole command on a one-DAG trace (start, simulate, write the run). Target:
starts in ≤ 0.3 s. The biggest imports are listed so a regression names itself. Every process starts as a user's
Python does, from cached bytecode (``PYTHONDONTWRITEBYTECODE`` cleared; the first, untimed, compiles it)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH_IMPORTS = "import servetwin.cli, servetwin.commands, simulator.simulate, analysis.records, scenarios.trace"
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(ROOT)}


def _imports() -> tuple[float, list[tuple[str, float]]]:
    """Seconds of top-level imports on the simulate path, and the five largest."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", PATH_IMPORTS], capture_output=True, text=True,
                          cwd=ROOT, check=True, env=ENV)
    top: list[tuple[str, float]] = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2][1:].startswith(" "):
            top.append((parts[2].strip(), int(parts[1]) / 1e6))
    return sum(s for _, s in top), sorted(top, key=lambda x: -x[1])[:5]


def main(repeats: int = 5) -> dict:
    imports = [_imports() for _ in range(repeats + 1)][1:]
    walls = []
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "t"
        scen = Path(d) / "s.yaml"
        scen.write_text("duration_s: 20\narrivals: {rate: 0.5}\nprompts: {length: 512, sharing: 0.5}\n")
        subprocess.run([sys.executable, "-m", "servetwin.cli", "trace", "compile", "--scenario", str(scen),
                        "--out", str(trace)], cwd=ROOT, check=True, capture_output=True, env=ENV)
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "servetwin.cli", "simulate", "--trace", str(trace), "--engine",
                            "sglang-0.4.1", "--out", str(Path(d) / f"r{i}")], cwd=ROOT, check=True, capture_output=True,
                           env=ENV)
            walls.append(time.perf_counter() - t0)
        walls = walls[1:]
    med = statistics.median(s for s, _ in imports)
    return {"bench": "startup", "imports_s": round(med, 3), "simulate_command_s": round(statistics.median(walls), 3),
            "largest_imports": [[n, round(s, 3)] for n, s in imports[0][1]]}


if __name__ == "__main__":
    print(json.dumps(main()))
