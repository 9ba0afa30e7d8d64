"""``simulate(trace, engine, hardware, model, overrides)`` → RunRecord."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np
import simpy

from analysis.records import RunRecord, default_exclusion
from scenarios.trace import Trace
from simulator.config import EngineConfig
from simulator.cost_model import CostModel, extends_whole_sequence
from simulator.engine import Replica
from simulator.gc_window import fewer_collections
from simulator.presets import check_startup, resolve
from simulator.profiles import HardwareProfile, InstanceCalibration, ModelProfile, load_hardware, load_model
from simulator.schedulers.registry import make_scheduler
from simulator.telemetry import Telemetry
from simulator.workload import DagDriver


def graph_limit(cfg: EngineConfig) -> int:
    return int(cfg.cuda_graph_max_bs or 0)


def full_extend_attention(cfg: EngineConfig) -> bool:
    """Whether the engine's attention backend attends a prefill chunk over its whole sequence."""
    return extends_whole_sequence(getattr(cfg, "attention_backend", None))


def run_id_for(trace: Trace, preset: str, cfg: EngineConfig, hw: str, model: str) -> str:
    blob = json.dumps([trace.digest, preset, cfg.model_dump(mode="json"), hw, model], sort_keys=True)
    return f"sim-{preset}-s{trace.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def simulate(trace: Trace, engine: str, hardware: str | HardwareProfile = "l4",
             model: str | ModelProfile = "llama-3.1-8b", overrides: dict[str, Any] | None = None,
             context: int | None = 16384, timeout_s: float = 300.0, record_tokens: bool = False,
             check_every: int = 0, telemetry_interval_s: float = 1.0,
             step_log: list[dict[str, Any]] | None = None, fast_forward: bool = True) -> RunRecord:
    """Simulate one engine replica serving ``trace``; returns a RunRecord (times from the run's start).
    With a ``step_log`` list, every step is appended to it as the engine's step log writes a forward
    (simulator/engine.py). ``fast_forward=False`` advances every step as its own event (the reference mode;
simulator.fast_forward)."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    mp = load_model(model) if isinstance(model, str) else model
    cfg = resolve(engine, hw, mp, context, overrides)
    longest = int((trace.prompt_lengths() + trace.arrays["max_tokens"]).max()) if trace.n_requests else 0
    check_startup(cfg, longest)
    sched = make_scheduler(cfg)
    cost = CostModel(hw, mp, sched.family, cfg.tensor_parallel_size, graph_limit(cfg), full_extend_attention(cfg))
    env = simpy.Environment()
    tel = Telemetry(telemetry_interval_s, float(trace.scenario["duration_s"]))
    driver: DagDriver
    replica = Replica(env, sched, cost, tel, lambda r: driver.finished(r), check_every, step_log, fast_forward)
    driver = DagDriver(env, trace, replica.submit, replica.abort, timeout_s, record_tokens)
    with fewer_collections():
        env.run()
    live = list(driver.requests.values())
    reqs = driver.log.columns(live)          # columns: a DataFrame only when one is asked for
    c = sched.counters
    meta = {
        "run_id": run_id_for(trace, engine, cfg, hw.name, mp.name), "source": "sim",
        "trace_digest": trace.digest, "scenario": trace.scenario, "seed": trace.seed, "engine": engine,
        "engine_config": cfg.model_dump(mode="json"), "hardware": hw.name, "model": mp.name,
        "offered_load_rps": float(trace.manifest["offered_load_rps"]),
        "run_window": {"start_s": 0.0, "duration_s": float(trace.scenario["duration_s"]),
                       "end_s": float(env.now)},
        "exclusion": default_exclusion(), "request_timeout_s": timeout_s,
        "telemetry_summary": tel.summary(c.preemptions, c.prefix_hit_tokens, c.prefix_query_tokens),
        "versions": _versions(), "busy_s": replica.busy_s,
    }
    if not (cal := InstanceCalibration.of(hw, sched.family)).is_identity:
        meta["calibration"] = dataclasses.asdict(cal)          # the instance's own scales, as simulated
    chunks = driver.log.chunks(live) if record_tokens else None
    return RunRecord(meta=meta, requests=reqs, telemetry=tel.columns(), chunks=chunks)


def _versions() -> dict[str, str]:
    import simpy as _s

    from analysis.records import servetwin_version
    return {"servetwin": servetwin_version(), "simpy": _s.__version__, "numpy": np.__version__}
