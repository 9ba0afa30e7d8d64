"""Benchmark: the whole reference grid (every sweep, both arms, 3 seeds) on this machine's cores.
Target ≤ 60 s wall on 2 cores."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from scenarios.grid import cells, load_grid
from simulator.sweep import run_cells

GRID = Path(__file__).resolve().parents[2] / "scenarios" / "grids" / "reference.yaml"


def main(jobs: int = 2) -> dict:
    cs = cells(load_grid(GRID))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        run_cells(cs, d, jobs=jobs)
        w = time.perf_counter() - t0
    sim_hours = sum(float(c.scenario["duration_s"]) for c in cs) / 3600
    return {"bench": "reference-grid", "runs": len(cs), "jobs": jobs, "wall_s": w, "simulated_load_hours": sim_hours}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)))
