"""Scenario specs: what is run. Frozen pydantic models loaded from YAML.

A scenario fixes the four layers of a seeded agent workload (arrivals, topology, prompts, outputs),
the tool-delay distributions, the run duration and the seed. ``compile_trace`` turns it into a Trace.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from foundation.errors import SpecError
from scenarios.yaml_text import load_yaml

ROLES = ("planner", "worker", "aggregator", "turn")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Arrivals(_Frozen):
    """L1: when agent graphs (DAGs) arrive. ``rate`` is in DAGs per second."""

    kind: Literal["gamma", "poisson", "constant", "replay"] = Field(
        "gamma", description="inter-arrival law; replay uses `times`")
    rate: float = Field(0.12, gt=0, description="DAG arrivals per second (λ)")
    cv: float = Field(1.5, gt=0, description="coefficient of variation of gamma gaps (shape = 1/cv²)")
    times: tuple[float, ...] = Field((), description="replay: DAG arrival times in seconds, ascending")

    @model_validator(mode="after")
    def _replay_needs_times(self) -> Arrivals:
        if self.kind == "replay":
            if not self.times:
                raise ValueError("arrivals.kind 'replay' needs a non-empty `times` list")
            if any(t < 0 for t in self.times) or list(self.times) != sorted(self.times):
                raise ValueError("arrivals.times must be non-negative and ascending")
        return self


class ToolDelay(_Frozen):
    """Duration of one simulated tool call. Lognormal from (median, p95) by default, or empirical samples.

    Default class ``mcp``: median 0.5 s, p95 2.5 s — the Model Context Protocol round-trip figures
    (hosted tool servers 0.5–1.2 s median, p95 > 2.5 s under bursts) quoted in the cost-model reference
    notes, section 5; marked unconfirmed there. Draws are clipped at ``max_s``.
    """

    kind: Literal["lognormal", "empirical", "constant"] = "lognormal"
    median_s: float = Field(0.5, gt=0)
    p95_s: float = Field(2.5, gt=0)
    max_s: float = Field(30.0, gt=0, description="upper bound; the validator refuses larger delays")
    samples: tuple[float, ...] = Field((), description="empirical: observed delays in seconds")
    source: str = "MCP tool round-trips, median 0.5 s / p95 2.5 s (industry measurements, unconfirmed)"

    @model_validator(mode="after")
    def _check(self) -> ToolDelay:
        if self.kind == "lognormal" and self.p95_s <= self.median_s:
            raise ValueError("tools: p95_s must exceed median_s for a lognormal delay")
        if self.kind == "empirical" and (not self.samples or min(self.samples) < 0):
            raise ValueError("tools: an empirical delay needs non-negative `samples`")
        return self

    @property
    def sigma_ln(self) -> float:
        return math.log(self.p95_s / self.median_s) / 1.6448536269514722


class FanOut(_Frozen):
    """planner → `workers` workers (each after a tool call) → aggregator."""

    kind: Literal["fanout"] = "fanout"
    workers: int = Field(4, ge=1, le=512)
    tool: str = "mcp"


class Chain(_Frozen):
    """A multi-turn agent loop: `turns` requests in sequence, each prompt carrying the history so far."""

    kind: Literal["chain"] = "chain"
    turns: int = Field(4, ge=1, le=256)
    tool: str = "mcp"
    first_turn_tokens: int | None = Field(None, ge=1, description="the first turn's own new tokens (default: "
                                          "the suffix length D, as every later turn)")
    history_reply_tokens: int | None = Field(None, ge=0, description="tokens of each earlier reply carried in "
                                             "later prompts (default: the whole output, as an agent loop does; "
                                             "a client that appends a fixed short reply carries only that)")

    @model_serializer(mode="wrap")
    def _drop_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Unset options are written as before they existed, so existing traces keep their bytes."""
        out = dict(handler(self))
        for k in ("first_turn_tokens", "history_reply_tokens"):
            if out.get(k) is None:
                out.pop(k, None)
        return out


class MixItem(_Frozen):
    weight: float = Field(gt=0)
    topology: Annotated[FanOut | Chain, Field(discriminator="kind")]


class Mix(_Frozen):
    """A mix of topologies chosen per DAG with the given weights."""

    kind: Literal["mix"] = "mix"
    items: tuple[MixItem, ...] = Field(min_length=1)


Topology = Annotated[FanOut | Chain | Mix, Field(discriminator="kind")]


class Prompts(_Frozen):
    """L3: shared prefix of F tokens + optional per-DAG context + unique suffix of D tokens.

    Give either (``length``, ``sharing``) = (L, σ) or (``prefix_tokens``, ``suffix_tokens``) = (F, D).
    ``prefix_groups`` K > 1 draws K distinct shared prefixes of F tokens each; every DAG draws its group
    (seeded; Zipf-skewed by ``prefix_group_skew``, 0 = uniform), so that where a DAG is served matters
    behind a router. K = 1 (the default) is the study's one prefix per run, and its traces stay unchanged.
    """

    length: int | None = Field(None, ge=1, description="L = F + D")
    sharing: float | None = Field(None, ge=0, lt=1, description="σ = F / (F + D), in [0, 1)")
    prefix_tokens: int | None = Field(None, ge=0, description="F")
    suffix_tokens: int | None = Field(None, ge=1, description="D")
    dag_context_tokens: int = Field(0, ge=0, description="context shared by the requests of one DAG")
    vocab_low: int = Field(0, ge=0, description="smallest token id drawn")
    vocab_high: int = Field(128000, ge=1, description="one past the largest id drawn (special ids excluded)")
    exclude: tuple[int, ...] = Field((), description="further token ids never drawn")
    prefix_groups: int = Field(1, ge=1, le=4096, description="K distinct shared prefixes; each DAG draws one")
    prefix_group_skew: float = Field(0.0, ge=0, le=8, description="Zipf exponent s of the group draw "
                                     "(P(k) ∝ 1/(k+1)^s); 0 = uniform")

    @model_serializer(mode="wrap")
    def _drop_default_groups(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """One prefix group is written as before groups existed, so existing traces keep their bytes."""
        out = handler(self)
        if self.prefix_groups == 1 and self.prefix_group_skew == 0:
            out.pop("prefix_groups", None)
            out.pop("prefix_group_skew", None)
        return dict(out)

    @model_validator(mode="after")
    def _one_form(self) -> Prompts:
        lsig = self.length is not None or self.sharing is not None
        fd = self.prefix_tokens is not None or self.suffix_tokens is not None
        if lsig and fd:
            raise ValueError("prompts: give either (length, sharing) or (prefix_tokens, suffix_tokens), not both")
        if lsig and (self.length is None or self.sharing is None):
            raise ValueError("prompts: `length` and `sharing` go together")
        if fd and (self.prefix_tokens is None or self.suffix_tokens is None):
            raise ValueError("prompts: `prefix_tokens` and `suffix_tokens` go together")
        if self.vocab_high - self.vocab_low - len(set(self.exclude)) < 2:
            raise ValueError("prompts: the vocabulary range must leave at least 2 token ids")
        if not lsig and not fd:
            object.__setattr__(self, "length", 4096)
            object.__setattr__(self, "sharing", 0.9)
        if self.D < 1:
            raise ValueError(f"prompts: σ={self.sharing} at L={self.length} leaves no unique suffix token")
        return self

    @property
    def F(self) -> int:
        if self.prefix_tokens is not None:
            return self.prefix_tokens
        assert self.length is not None and self.sharing is not None
        return int(round(self.sharing * self.length))

    @property
    def D(self) -> int:
        if self.suffix_tokens is not None:
            return self.suffix_tokens
        assert self.length is not None
        return self.length - self.F

    @property
    def target_sharing(self) -> float:
        if self.sharing is not None:
            return self.sharing
        return self.F / (self.F + self.D)


class Outputs(_Frozen):
    """Output caps per role (max_tokens; the trace asks for exactly this many, ignore_eos)."""

    planner: int = Field(128, ge=1)
    worker: int = Field(128, ge=1)
    aggregator: int = Field(256, ge=1)
    turn: int = Field(128, ge=1)

    def cap(self, role: str) -> int:
        return int(getattr(self, role))


class Client(_Frozen):
    """The client that sends the trace, one of two kinds of limit on requests in flight (unset: every request goes
    out when due):

    - ``max_connections``: an HTTP client's connection pool (servetwin's live dispatcher sends with one). A held
      request was sent by the trace: its send time and timeout start then, so the wait counts in its TTFT.
    - ``max_concurrency``: a semaphore before the send (``vllm bench serve --max-concurrency``). A held request is
      not sent yet: its send time and timeout start when a slot frees; the wait shows as dispatch lag, not TTFT.
    """

    max_connections: int | None = Field(None, ge=1)
    max_concurrency: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_limit(self) -> Client:
        if self.max_connections is not None and self.max_concurrency is not None:
            raise ValueError("client: give max_connections (a connection pool) or max_concurrency (a semaphore "
                             "before the send), not both")
        return self


def _default_tools() -> dict[str, ToolDelay]:
    return {"mcp": ToolDelay()}


class Scenario(_Frozen):
    """A whole workload: everything the trace compiler needs besides nothing else."""

    name: str = "scenario"
    seed: int = Field(0, ge=0)
    duration_s: float = Field(600.0, gt=0, description="DAG arrivals fall in [0, duration_s)")
    arrivals: Arrivals = Arrivals()
    topology: Topology = FanOut()
    prompts: Prompts = Prompts()
    outputs: Outputs = Outputs()
    client: Client | None = None
    tools: dict[str, ToolDelay] = Field(default_factory=_default_tools)

    @model_validator(mode="after")
    def _tools_known(self) -> Scenario:
        for t in _tool_names(self.topology):
            if t not in self.tools:
                raise ValueError(f"topology uses tool class '{t}' but tools defines only {sorted(self.tools)}")
        return self

    def with_seed(self, seed: int) -> Scenario:
        return self.model_copy(update={"seed": seed})


def _tool_names(topo: Any) -> list[str]:
    if isinstance(topo, Mix):
        return [n for it in topo.items for n in _tool_names(it.topology)]
    return [topo.tool]


def format_validation_error(err: ValidationError, where: str) -> str:
    """First problem of a pydantic error as one line: field, value, what is accepted."""
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
    val = e.get("input")
    val_s = repr(val) if not isinstance(val, dict) else "{…}"
    if len(val_s) > 60:
        val_s = val_s[:57] + "..."
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"{where}: field '{loc}' = {val_s}: {msg}"


def scenario_from_dict(data: Any, where: str = "scenario") -> Scenario:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(err, where)) from None


def load_scenario(path: str | Path) -> Scenario:
    return scenario_from_dict(load_yaml(path), str(path))
