"""Campaign runner: (engine configuration, scenario, seed) runs executed one at a time with a pause
between runs; each retried up to ``retries`` times (the record of every failed attempt kept); resumable
by skipping runs whose record passed. Engines are either external endpoints or local vLLM CPU servers
started per configuration (one engine up at a time, as in the study).

```yaml
name: cpu-apc
pause_s: 5
retries: 2
warmup: 20
scenario: scenarios/examples/cpu-small.yaml   # default for every configuration
seeds: [1, 2, 3]
configs:
  - {label: apc-on,  local: {enable_prefix_caching: true,  block_size: 32}}
  - {label: apc-off, local: {enable_prefix_caching: false, block_size: 32}}
  - {label: remote,  endpoint: "http://10.0.0.5:8000", model: meta-llama/Llama-3.1-8B-Instruct}
```
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from analysis.records import read_run
from foundation.errors import SpecError
from live.dispatcher import DispatchConfig
from live.local_engine import ROOT, VllmCpu, free_port, tiny_model
from live.run import LiveOptions, run_live
from scenarios.compiler import compile_trace
from scenarios.spec import format_validation_error, load_scenario, load_yaml


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LocalSpec(_F):
    """The local vLLM CPU engine's configuration, in vLLM's own argument names."""

    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = False
    max_num_batched_tokens: int | None = None
    block_size: int = 32
    scheduling_policy: str = "fcfs"
    kv_gib: int = 1

    @model_validator(mode="before")
    @classmethod
    def _engine_names(cls, data: Any) -> Any:
        """Earlier campaign files' spellings, refused with the engine's name for each."""
        renamed = {"prefix_caching": "enable_prefix_caching", "policy": "scheduling_policy",
                   "chunked_prefill": "enable_chunked_prefill: true with max_num_batched_tokens: N"}
        for old, new in renamed.items():
            if isinstance(data, dict) and old in data:
                raise ValueError(f"'{old}' is spelled as vLLM spells it now: {new}")
        return data


class RunConfig(_F):
    label: str
    local: LocalSpec | None = None
    endpoint: str | None = None
    model: str = "tiny-llama"
    scenario: str | None = None
    seeds: tuple[int, ...] | None = None
    expect: dict[str, Any] = Field(default_factory=dict)


class Campaign(_F):
    name: str
    pause_s: float = 30.0
    retries: int = Field(2, ge=0)
    warmup: int = 20
    timeout_s: float = 300.0
    scenario: str | None = None
    seeds: tuple[int, ...] = (1, 2, 3)
    cold_cache: bool = False            # empty each engine's prefix cache before every run (docs/live.md)
    configs: tuple[RunConfig, ...] = Field(min_length=1)


def load_campaign(path: str | Path) -> Campaign:
    data = load_yaml(path)
    try:
        c = Campaign.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(err, str(path))) from None
    for rc in c.configs:
        if (rc.local is None) == (rc.endpoint is None):
            raise SpecError(f"{path}: config '{rc.label}' needs exactly one of `local` or `endpoint`")
        if not (rc.scenario or c.scenario):
            raise SpecError(f"{path}: config '{rc.label}' has no scenario (set `scenario` at the top or per config)")
    return c


def _passed(d: Path) -> bool:
    try:
        return bool(read_run(d).meta.get("passed"))
    except Exception:  # noqa: BLE001 - an unreadable record is not a passed run
        return False


def run_campaign(c: Campaign, out: str | Path, base: Path = Path("."),
                 log: Callable[[str], None] = print) -> dict[str, str]:
    """Run every (config, seed); returns {run key: 'skipped' | 'passed' | 'failed'}."""
    out = Path(out)
    status: dict[str, str] = {}
    first = True
    for rc in c.configs:
        sc = load_scenario(base / (rc.scenario or c.scenario or ""))
        todo = [s for s in (rc.seeds or c.seeds) if not _passed(out / rc.label / f"seed-{s}")]
        for s in (rc.seeds or c.seeds):
            if s not in todo:
                status[f"{rc.label}/seed-{s}"] = "skipped"
        if not todo:
            continue
        engine = _engine(rc, out) if rc.local else None
        try:
            endpoint = engine.url if engine else str(rc.endpoint)
            expect = {**(engine.expected() if engine else {}), **rc.expect}
            for seed in todo:
                if not first:
                    time.sleep(c.pause_s)
                first = False
                key = f"{rc.label}/seed-{seed}"
                status[key] = _attempts(c, rc, sc.with_seed(seed), endpoint, expect, out / rc.label / f"seed-{seed}",
                                        engine.log_path if engine else None, log, engine.pid if engine else None)
        finally:
            if engine:
                engine.stop()
    return status


def _engine(rc: RunConfig, out: Path) -> VllmCpu:
    assert rc.local is not None
    model = tiny_model(ROOT / ".engine-venv" / "tiny-llama")
    loc = rc.local
    eng = VllmCpu(model, port=free_port(), log_path=out / rc.label / "engine.log", **loc.model_dump())
    return eng.start()


def _attempts(c: Campaign, rc: RunConfig, sc: Any, endpoint: str, expect: dict[str, Any], dest: Path,
              engine_log: Path | None, log: Callable[[str], None], engine_pid: int | None = None) -> str:
    trace = compile_trace(sc)
    for attempt in range(c.retries + 1):
        cfg = DispatchConfig(endpoint=endpoint, model=rc.model, warmup=c.warmup, timeout_s=c.timeout_s,
                             stall_s=c.timeout_s)
        opts = LiveOptions(engine_label=rc.label, engine_log=str(engine_log) if engine_log else None,
                           expected=expect, engine_pid=engine_pid, cold_cache=c.cold_cache)
        rec = run_live(trace, cfg, opts, dest)
        if rec.meta["passed"]:
            log(f"{rc.label} seed {sc.seed}: passed")
            return "passed"
        kept = dest.parent / f"{dest.name}.failed-{attempt + 1}"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(dest, kept)
        log(f"{rc.label} seed {sc.seed}: attempt {attempt + 1} failed ({rec.meta['errors_by_kind']}); kept {kept}")
    return "failed"
