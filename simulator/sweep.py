"""Run grid cells: one RunRecord per cell, skipping cells already complete (resumable), on a local
process pool or a Ray cluster. Each cell is a pure function of its inputs, so records are identical
whichever executor ran them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from analysis.records import write_run
from scenarios.compiler import compile_trace
from scenarios.errors import ServetwinError
from scenarios.grid import Cell
from simulator.simulate import simulate


def run_cell(cell: Cell, out: str) -> str:
    """Simulate one cell and write its RunRecord atomically under out/<cell.key>. Returns the key."""
    trace = compile_trace(cell.scenario_model())
    rec = simulate(trace, cell.engine, cell.hardware, cell.model, cell.overrides, cell.context)
    rec.meta["labels"] = {"grid": cell.grid, "condition": cell.condition, "arm": cell.arm,
                          "config": cell.config, "config_index": cell.config_index}
    write_run(rec, Path(out) / cell.key)
    return cell.key


def pending(cells: Iterable[Cell], out: str | Path) -> list[Cell]:
    return [c for c in cells if not (Path(out) / c.key / "run.json").is_file()]


def run_cells(cells: list[Cell], out: str | Path, executor: str = "local", jobs: int = 0,
              address: str | None = None, progress: Callable[[int, int], None] | None = None) -> list[str]:
    todo = pending(cells, out)
    if executor == "ray":
        return _run_ray(todo, str(out), address, progress)
    jobs = jobs or os.cpu_count() or 1
    done: list[str] = []
    if jobs == 1 or len(todo) <= 1:
        for c in todo:
            done.append(run_cell(c, str(out)))
            if progress:
                progress(len(done), len(todo))
        return done
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futs = [pool.submit(run_cell, c, str(out)) for c in todo]
        for f in as_completed(futs):
            done.append(f.result())
            if progress:
                progress(len(done), len(todo))
    return done


def _run_ray(todo: list[Cell], out: str, address: str | None,
             progress: Callable[[int, int], None] | None) -> list[str]:
    try:
        import ray
    except ImportError:
        raise ServetwinError("--executor ray needs Ray: pip install 'servetwin[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_cell)
    refs = [remote.remote(c, out) for c in todo]
    done: list[str] = []
    while refs:
        ready, refs = ray.wait(refs, num_returns=1)
        done.extend(ray.get(ready))
        if progress:
            progress(len(done), len(todo))
    return done
