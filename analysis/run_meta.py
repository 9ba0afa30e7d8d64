"""The typed contract of a run's ``run.json``: every field a RunRecord's metadata carries, what it means and
who writes it. ``analysis.records`` validates each record it writes or reads against it; blocks that belong
to one kind of run (a live run's host, a cluster, a served run, a probe's plan) are typed where they are
read by others and described here.

Schema versions: 2 sealed every record (digests of each file, of the resolved configuration and of run.json);
3 documents the metadata here and adds ``calibration`` (the per-instance calibration a simulated run used).
Version-2 records are read as they are."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class RunWindow(_Open):
    """The measured window, seconds from the run's start."""

    start_s: float = Field(0.0, description="the window's start (0)")
    duration_s: float = Field(gt=0, description="the trace's arrival window: arrivals fall in [0, duration_s)")
    end_s: float | None = Field(None, description="when the last request finished (the run's clock at its end)")
    start_unix: float | None = Field(None, description="live runs: the run's start in Unix seconds (orders runs)")


class Exclusion(_Open):
    """The study's rules for what a run's metrics leave out."""

    exclude_first_dags: StrictInt = Field(1, description="the first DAGs of a run, excluded from its metrics")
    warmup_requests_discarded: StrictInt = Field(0, description="live: warm-up requests sent and never recorded")


class InstanceCalibrationMeta(_Open):
    """The per-instance calibration a simulated run used, on top of its hardware profile's family overheads
    (``simulator.profiles.InstanceCalibration``); absent when the profile carries none."""

    family: str = Field(description="the engine family whose overheads it scales")
    decode_scale: float = 1.0
    decode_scale_lone: float | None = None
    prefill_scale: float = 1.0
    request_s: float = 0.0
    deliver_s: float = 0.0
    front_end_step_s: float = 0.0
    stream_chunk_s: float = 0.0


class RunMeta(_Open):
    """run.json. Required fields first; the rest are written by the kinds of run named in their description."""

    schema_version: StrictInt = Field(description="2 or 3 (see the module's docstring)")
    run_id: str = Field(min_length=1, description="stable id: trace digest, engine, configuration (and time, live)")
    source: str = Field(description="sim, live, probe or serve")
    trace_digest: str = Field(description="SHA-256 of the trace's arrays and manifest; empty for probes")
    scenario: dict[str, Any] = Field(description="the resolved scenario the trace was compiled from (empty: probes)")
    seed: StrictInt = Field(description="the trace's seed")
    engine: str = Field(description="sim: the preset; live: the configuration's label")
    engine_config: dict[str, Any] = Field(description="sim: the resolved preset; live: the engine's own resolved "
                                                      "configuration (start-up log, /metrics, server info)")
    hardware: str = Field(description="the hardware profile's name (live: 'live')")
    model: str = Field(description="the model profile's (live: the served model's) name")
    offered_load_rps: float = Field(description="requests per second the trace offers (NaN for probes)")
    run_window: RunWindow
    exclusion: Exclusion
    telemetry_summary: dict[str, Any] = Field(description="KV peak, preemptions, prefix hits over the run; KV and "
                                              "waiting peaks and preemptions within the run window T (*_window)")
    versions: dict[str, str] = Field(description="servetwin's and its key libraries' versions")
    digests: dict[str, str] = Field(description="file → SHA-256, plus engine_config and run.json")

    request_timeout_s: float | None = Field(None, description="sim and live: a request's timeout")
    busy_s: float | None = Field(None, description="sim: seconds the engine (all replicas) spent in steps")
    calibration: InstanceCalibrationMeta | None = Field(None, description="sim: the per-instance calibration used")
    labels: dict[str, Any] | None = Field(None, description="grid cell (grid, condition, arm, …) or twin_of/config")
    cluster: dict[str, Any] | None = Field(None, description="replicas, engines, router and its resolved settings")
    status: str | None = Field(None, description="live: complete, interrupted or failed")
    passed: bool | None = Field(None, description="live: complete and at least 95 % of requests succeeded")
    success_fraction: float | None = Field(None, description="live: succeeded / sent")
    errors_by_kind: dict[str, int] | None = Field(None, description="live: failed requests by error kind")
    dispatch_lag_s: dict[str, float] | None = Field(None, description="live: send − planned time, p50/p99/max")
    measurement_warnings: list[str] | None = Field(None, description="live: what may have disturbed the timing")
    config_warnings: list[str] | None = Field(None, description="live: resolved configuration vs what was expected")
    endpoint: str | None = Field(None, description="live: the server driven (credentials redacted)")
    host: dict[str, Any] | None = Field(None, description="live: CPUs, steal, the engine's processes over the run")
    client: dict[str, Any] | None = Field(None, description="live and probes: the client's scheduling")
    client_lag: dict[str, Any] | None = Field(None, description="probes: the client's event-loop lag")
    prefix_cache_reset: str | None = Field(None, description="live: the endpoint that emptied the prefix cache")
    serve: dict[str, Any] | None = Field(None, description="serve: speed-up, release lag, refusals, request ids")
    probes: list[dict[str, Any]] | None = Field(None, description="probes: every probe request's kind and shape")
    plan: dict[str, Any] | None = Field(None, description="probes: the probe plan (calibrate.probes.ProbePlan)")
    mixed_windows: dict[str, Any] | None = Field(None, description="probes: each mixed probe's window")

    @field_validator("offered_load_rps")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if not math.isnan(v) and v < 0:
            raise ValueError("a non-negative number (NaN for probes)")
        return v
