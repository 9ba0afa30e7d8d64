"""Grids: a cross product of conditions × arms × engine configurations × seeds, loaded from YAML.

```yaml
name: reference-rate
seeds: [1, 2, 3]
hardware: l4            # default for every configuration
model: llama-3.1-8b
context: 16384
base: {…scenario…}      # the scenario every condition starts from
conditions:             # explicit, each a set of dotted-path overrides …
  - {name: rate-0.12, set: {arrivals.rate: 0.12, duration_s: 900}}
  - {name: mooncake, trace: traces/mooncake}   # … or a trace directory (servetwin trace import), run once
sweep:                  # … and/or a cross product of dotted paths (names generated)
  prompts.sharing: [0, 0.3]
  replicas: [1, 4]      # cluster keys: replicas, router, router_set.<setting> (servetwin simulate --replicas …)
  router: [round_robin, cache_aware]
arms:                   # named arms; each maps configuration names to an engine preset + overrides
  defaults:
    vllm: {engine: vllm-0.6.3, set: {enable_prefix_caching: true}}
    sglang: {engine: sglang-0.4.1}
```
Runs pair by seed within a (condition, arm); the gap is the arm's first configuration over its second.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from foundation.errors import SpecError
from scenarios.spec import Scenario, format_validation_error, load_yaml, scenario_from_dict


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConfigSpec(_F):
    engine: str
    set: dict[str, Any] = Field(default_factory=dict)
    hardware: str | None = None
    model: str | None = None
    context: int | None = None


class Condition(_F):
    name: str
    set: dict[str, Any] = Field(default_factory=dict)
    trace: str | None = Field(None, description="a trace directory replayed as it is (no set, no seeds)")
    arms: tuple[str, ...] | None = Field(None, description="run only these arms (default: all)")


class GridSpec(_F):
    name: str
    seeds: tuple[int, ...] = (1, 2, 3)
    hardware: str = "l4"
    model: str = "llama-3.1-8b"
    context: int = 16384
    base: dict[str, Any] = Field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    sweep: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    arms: dict[str, dict[str, ConfigSpec]] = Field(min_length=1)
    scale_with_replicas: tuple[str, ...] = Field((), description="scenario paths (e.g. arrivals.rate) multiplied "
                                                 "by each cell's replica count: the load per replica stays put")


CLUSTER_KEYS = ("replicas", "router")         # condition keys that set the cluster, not the scenario


def split_cluster(sets: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A condition's sets → (scenario paths, cluster keys: replicas, router, router_set.<k>)."""
    scen = {k: v for k, v in sets.items() if k not in CLUSTER_KEYS and not k.startswith("router_set.")}
    return scen, {k: v for k, v in sets.items() if k not in scen}


class Cell(BaseModel):
    model_config = ConfigDict(frozen=True)

    grid: str
    condition: str
    arm: str
    config: str
    config_index: int
    seed: int
    scenario: dict[str, Any]
    trace: str | None = None
    engine: str
    overrides: dict[str, Any]
    hardware: str
    model: str
    context: int
    replicas: int = 1
    router: str | None = None
    router_settings: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_cluster(self) -> bool:
        return self.replicas > 1 or self.router is not None

    @property
    def key(self) -> str:
        return f"{self.condition}/{self.arm}/{self.config}/seed-{self.seed}"

    def scenario_model(self) -> Scenario:
        return scenario_from_dict(self.scenario, f"grid {self.grid} condition {self.condition}")


def set_path(d: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    cur = d
    for k in keys[:-1]:
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[k] = nxt
        cur = nxt
    cur[keys[-1]] = value


def apply_sets(base: dict[str, Any], sets: dict[str, Any]) -> dict[str, Any]:
    import copy
    out = copy.deepcopy(base)
    for path, v in sets.items():
        set_path(out, path, v)
    return out


def _fmt(v: Any) -> str:
    return str(v).replace("/", "-")


def expand_conditions(g: GridSpec) -> list[Condition]:
    conds = list(g.conditions)
    if g.sweep:
        paths = list(g.sweep)
        for combo in itertools.product(*(g.sweep[p] for p in paths)):
            name = "-".join(f"{p.split('.')[-1]}={_fmt(v)}" for p, v in zip(paths, combo, strict=True))
            conds.append(Condition(name=name, set=dict(zip(paths, combo, strict=True))))
    if not conds:
        conds = [Condition(name="base")]
    for c in conds:
        if c.trace is not None and c.set:
            raise SpecError(f"grid {g.name} condition {c.name}: a condition with a trace takes no 'set' (the trace "
                            "is replayed as it is)")
        unknown = [a for a in (c.arms or ()) if a not in g.arms]
        if unknown:
            raise SpecError(f"grid {g.name} condition {c.name}: arms {unknown} not defined; defined: {list(g.arms)}")
    names = [c.name for c in conds]
    if len(set(names)) != len(names):
        raise SpecError(f"grid {g.name}: condition names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    return conds


def load_grid(path: str | Path) -> GridSpec:
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a grid is a mapping")
    if data.get("kind") == "twin-study":
        raise SpecError(f"{path}: the CPU twin study's design, not a simulator grid; run it with servetwin twin-study")
    try:
        return GridSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(err, str(path))) from None


def cells(g: GridSpec, duration_scale: float = 1.0) -> list[Cell]:
    """Every cell of the grid, each scenario validated up front (bad input fails before anything runs)."""
    out: list[Cell] = []
    for cond in expand_conditions(g):
        if cond.trace is not None:
            out.extend(_trace_cells(g, cond))
            continue
        scen_sets, cl = split_cluster(cond.set)
        cluster = _cluster_fields(g, cond, cl)
        sc = _scaled(g, apply_sets(g.base, scen_sets), cluster["replicas"], cond)
        sc.setdefault("name", cond.name)
        sc["name"] = cond.name
        if duration_scale != 1.0:
            sc["duration_s"] = float(sc.get("duration_s", 600.0)) * duration_scale
        scenario_from_dict(sc, f"grid {g.name} condition {cond.name}")
        for arm, configs in g.arms.items():
            if cond.arms is not None and arm not in cond.arms:
                continue
            for idx, (cname, cs) in enumerate(configs.items()):
                for seed in g.seeds:
                    out.append(Cell(grid=g.name, condition=cond.name, arm=arm, config=cname, config_index=idx,
                                    seed=seed, scenario={**sc, "seed": seed}, engine=cs.engine,
                                    overrides=dict(cs.set), hardware=cs.hardware or g.hardware,
                                    model=cs.model or g.model, context=cs.context or g.context, **cluster))
    return out


def _scaled(g: GridSpec, sc: dict[str, Any], replicas: int, cond: Condition) -> dict[str, Any]:
    for path in g.scale_with_replicas:
        cur: Any = sc
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur.get(k) if isinstance(cur, dict) else None
        v = cur.get(keys[-1]) if isinstance(cur, dict) else None
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise SpecError(f"grid {g.name} condition {cond.name}: scale_with_replicas {path}: the scenario sets no "
                            "number there")
        set_path(sc, path, v * replicas)
    return sc


def _cluster_fields(g: GridSpec, cond: Condition, cl: dict[str, Any]) -> dict[str, Any]:
    n = cl.get("replicas", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SpecError(f"grid {g.name} condition {cond.name}: replicas {n!r}: expected a whole number ≥ 1")
    router = cl.get("router")
    if router is not None and not isinstance(router, str):
        raise SpecError(f"grid {g.name} condition {cond.name}: router {router!r}: expected a router name")
    settings = {k.split(".", 1)[1]: v for k, v in cl.items() if k.startswith("router_set.")}
    return {"replicas": n, "router": router, "router_settings": settings}


def _trace_cells(g: GridSpec, cond: Condition) -> list[Cell]:
    """A trace condition: every configuration replays the trace once, under the trace's own seed."""
    from scenarios.trace import read_trace
    assert cond.trace is not None
    t = read_trace(cond.trace, verify=False)
    out = []
    for arm, configs in g.arms.items():
        if cond.arms is not None and arm not in cond.arms:
            continue
        for idx, (cname, cs) in enumerate(configs.items()):
            out.append(Cell(grid=g.name, condition=cond.name, arm=arm, config=cname, config_index=idx, seed=t.seed,
                            scenario=t.scenario, trace=cond.trace, engine=cs.engine, overrides=dict(cs.set),
                            hardware=cs.hardware or g.hardware, model=cs.model or g.model,
                            context=cs.context or g.context))
    return out
