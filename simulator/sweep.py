"""Run grid cells: one RunRecord per cell, skipping cells already complete (resumable), on a local
process pool or a Ray cluster. Each cell is a pure function of its inputs, so records are identical
whichever executor ran them.

A cell counts as complete only when its sealed record (digests verified) was made from the same trace
(digest), the same resolved engine configuration and the same duration: a run of a ``--quick`` sweep, of an
edited grid or of another servetwin's compiler is run again, never silently kept. Ctrl-C stops the pool at
once (queued cells cancelled, workers stopped), keeping every cell already written.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from analysis.records import RecordError, read_meta, write_run
from foundation.errors import ServetwinError
from scenarios.compiler import compile_trace
from scenarios.grid import Cell
from scenarios.trace import Trace, read_trace
from simulator.cluster import ClusterSpec
from simulator.cluster_run import simulate_cluster
from simulator.presets import resolve
from simulator.profiles import load_hardware, load_model
from simulator.simulate import simulate


def run_cell(cell: Cell, out: str, trace: Trace | None = None) -> str:
    """Simulate one cell and write its RunRecord atomically under out/<cell.key>. Returns the key.
    ``trace``: the cell's trace when the caller already has it (cells of one trace share it)."""
    if trace is None:
        trace = _trace_of(cell)
    if cell.is_cluster:
        rec = simulate_cluster(trace, cluster_spec(cell), cell.hardware, cell.model, cell.context)
    else:
        rec = simulate(trace, cell.engine, cell.hardware, cell.model, cell.overrides, cell.context)
    rec.meta["labels"] = {"grid": cell.grid, "condition": cell.condition, "arm": cell.arm,
                          "config": cell.config, "config_index": cell.config_index}
    write_run(rec, Path(out) / cell.key)
    return cell.key


def _trace_of(cell: Cell) -> Trace:
    return read_trace(cell.trace) if cell.trace else compile_trace(cell.scenario_model())


def _trace_key(cell: Cell) -> str:
    return f"trace:{cell.trace}" if cell.trace else json.dumps(cell.scenario, sort_keys=True)


def _weight(cell: Cell) -> float:
    """A cell's rough cost for ordering: its offered requests (duration × rate), 0 where unknown."""
    arr = cell.scenario.get("arrivals") or {}
    rate = arr.get("rate") if isinstance(arr, dict) else None
    return float(cell.scenario.get("duration_s") or 0) * float(rate or 0) * cell.replicas


def trace_groups(cells: list[Cell]) -> list[list[Cell]]:
    """The cells grouped by trace (each trace is compiled once, for all its engines and arms), heaviest group
    first so that a pool's last tasks are short. Order within a group is the grid's."""
    groups: dict[str, list[Cell]] = {}
    for c in cells:
        groups.setdefault(_trace_key(c), []).append(c)
    return sorted(groups.values(), key=lambda g: -sum(map(_weight, g)))


def run_group(cells: list[Cell], out: str, on_done: Callable[[str], None] | None = None) -> list[str]:
    """Run cells that share one trace, compiling or reading it once; returns their keys in order (``on_done``
    hears each key as its cell is written)."""
    trace = _trace_of(cells[0])
    keys: list[str] = []
    for c in cells:
        keys.append(run_cell(c, out, trace))
        if on_done:
            on_done(keys[-1])
    return keys


def cluster_spec(cell: Cell) -> ClusterSpec:
    return ClusterSpec((cell.engine,) * cell.replicas, cell.router or "round_robin",
                       tuple(sorted(cell.router_settings.items())), tuple(sorted(cell.overrides.items())))


def _expected(cell: Cell, digests: dict[str, str]) -> dict[str, Any]:
    cfg = resolve(cell.engine, load_hardware(cell.hardware), load_model(cell.model), cell.context, cell.overrides)
    key = _trace_key(cell)
    if key not in digests:
        digests[key] = _trace_of(cell).digest
    duration = cell.scenario["duration_s"] if cell.trace else cell.scenario_model().duration_s
    return {"trace_digest": digests[key], "engine_config": cfg.model_dump(mode="json"), "duration_s": float(duration)}


def is_complete(cell: Cell, out: str | Path, digests: dict[str, str] | None = None) -> bool:
    """Whether out/<cell.key> holds a sealed record of exactly this cell."""
    path = Path(out) / cell.key
    if not (path / "run.json").is_file():
        return False
    try:
        meta = read_meta(path)
    except RecordError:
        return False
    want = _expected(cell, {} if digests is None else digests)
    return (meta["trace_digest"] == want["trace_digest"] and meta["engine_config"] == want["engine_config"]
            and float(meta["run_window"]["duration_s"]) == want["duration_s"] and _same_cluster(cell, meta))


def _same_cluster(cell: Cell, meta: dict[str, Any]) -> bool:
    cl = meta.get("cluster")
    if not cell.is_cluster:
        return cl is None
    return (cl is not None and cl["replicas"] == cell.replicas and cl["router"] == (cell.router or "round_robin")
            and all(cl["router_settings"].get(k) == v for k, v in cell.router_settings.items()))


def pending(cells: Iterable[Cell], out: str | Path) -> list[Cell]:
    digests: dict[str, str] = {}
    return [c for c in cells if not is_complete(c, out, digests)]


def _quiet_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # the parent stops the pool; no traceback per worker


def _stop(pool: ProcessPoolExecutor, futs: list[Future[list[str]]]) -> None:
    for f in futs:
        f.cancel()
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.terminate()                               # a cell cut short leaves only a hidden temporary directory
    pool.shutdown(wait=True, cancel_futures=True)


def run_cells(cells: list[Cell], out: str | Path, executor: str = "local", jobs: int = 0,
              address: str | None = None, progress: Callable[[int, int], None] | None = None,
              todo: list[Cell] | None = None) -> list[str]:
    """Run the cells not yet complete (``todo``: already found by ``pending``) and return their keys."""
    todo = pending(cells, out) if todo is None else todo
    if executor == "ray":
        return _run_ray(todo, str(out), address, progress)
    jobs = jobs or os.cpu_count() or 1
    done: list[str] = []
    if jobs == 1 or len(todo) <= 1:
        def written(key: str) -> None:
            done.append(key)
            if progress:
                progress(len(done), len(todo))
        for g in trace_groups(todo):
            run_group(g, str(out), written)
        return done
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_quiet_worker)
    futs = [pool.submit(run_group, g, str(out)) for g in trace_groups(todo)]
    try:
        for f in as_completed(futs):
            for key in f.result():
                done.append(key)
                if progress:
                    progress(len(done), len(todo))
    except BaseException:
        _stop(pool, futs)
        raise
    pool.shutdown(wait=True)
    return done


def _run_ray(todo: list[Cell], out: str, address: str | None,
             progress: Callable[[int, int], None] | None) -> list[str]:
    try:
        import ray
    except ImportError:
        raise ServetwinError("--executor ray needs Ray: pip install 'servetwin[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_group)
    refs = [remote.remote(g, out) for g in trace_groups(todo)]
    done: list[str] = []
    while refs:
        ready, refs = ray.wait(refs, num_returns=1)
        for key in ray.get(ready)[0]:
            done.append(key)
            if progress:
                progress(len(done), len(todo))
    return done
