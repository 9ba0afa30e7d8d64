"""The CPU twin study's design, read from ``scenarios/grids/twin-cpu.yaml``: its configurations (engine and
knobs in the engine's own argument names), the order instances start in, the pairs it compares, seeds, run
length, cells, calibration traces, the traces' scenario and the probe plan. The study's code reads these
names; what the study is lives in that file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from foundation.errors import SpecError

DESIGN = Path(__file__).resolve().parents[2] / "scenarios" / "grids" / "twin-cpu.yaml"


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Configuration(_F):
    engine: Literal["vllm", "sglang"]
    set: dict[str, Any]


class Search(_F):
    lo: float
    hi: float
    seconds: float
    seed: int


class CellPlan(_F):
    search: Search
    full: tuple[tuple[float, float], ...]
    quick: tuple[tuple[float, float], ...]


class Calibration(_F):
    seed: int
    seconds: float


class ProbePlanSpec(_F):
    repeats: int
    decode_batches: tuple[int, ...]
    shared_decode: tuple[int, ...]
    cached_study_shapes: bool


class Probed(_F):
    dir: str
    plan: Literal["study", "chunking"]
    batched: tuple[int, ...] = ()


class Design(_F):
    name: str
    kind: Literal["twin-study"]
    configurations: dict[str, Configuration]
    order: tuple[str, ...]
    knee_probes: str
    pairs: dict[str, tuple[str, str]]
    seeds: tuple[int, ...]
    quick_seeds: tuple[int, ...]
    run_s: float
    cells: CellPlan
    calibration: Calibration
    warm_up_seed: int
    scenario: dict[str, Any]
    probe_plan: ProbePlanSpec
    probes: dict[str, Probed]

    @model_validator(mode="after")
    def _labels_known(self) -> Design:
        known = set(self.configurations)
        named = {*self.order, self.knee_probes, *self.probes, *(x for p in self.pairs.values() for x in p)}
        if named - known:
            raise ValueError(f"configurations named but not defined: {sorted(named - known)}")
        if sorted(self.order) != sorted(known):
            raise ValueError("order must list every configuration once")
        if self.calibration.seed in self.seeds or self.warm_up_seed in (*self.seeds, self.calibration.seed):
            raise ValueError("the calibration and warm-up seeds must differ from the study's seeds and each other")
        return self


def load_design(path: Path = DESIGN) -> Design:
    try:
        return Design.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"{path}: cannot read the twin study's design: {err}") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise SpecError(f"{path}: {where}: {first['msg']}") from None


def scenario_dict(d: Design, rate: float, sharing: float, duration: float, seed: int) -> dict[str, Any]:
    """One trace of a cell: the design's scenario with the cell's rate and σ filled in."""
    sc = d.scenario
    arrivals = {"kind": sc["arrivals"]["kind"], "rate": rate,
                **{k: v for k, v in sc["arrivals"].items() if k != "kind"}}
    prompts = {"length": sc["prompts"]["length"], "sharing": sharing,
               **{k: v for k, v in sc["prompts"].items() if k != "length"}}
    return {"name": f"rate{rate:g}-sigma{sharing:g}", "seed": seed, "duration_s": duration, "arrivals": arrivals,
            "prompts": prompts, **{k: v for k, v in sc.items() if k not in ("arrivals", "prompts")}}
