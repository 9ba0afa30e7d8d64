"""``/metrics`` in the simulated engine's own Prometheus names, so dashboards and ``servetwin live``'s
telemetry read a served twin as they read the engine.

Names and histogram bounds: vLLM 0.6.3 ``vllm/engine/metrics.py`` (``Metrics``: ``gpu_cache_usage_perc``,
``gpu_prefix_cache_hit_rate``); vLLM V1 ``vllm/v1/metrics/loggers.py`` (``kv_cache_usage_perc``,
``prefix_cache_queries``/``hits`` counters); SGLang ``python/sglang/srt/metrics/collector.py`` (0.4.1:
``token_usage``, ``cache_hit_rate``, ``num_queue_reqs``; current releases add ``cached_tokens`` and
``num_retracted_reqs``). Latency histograms are observed in the simulated engine's time (virtual seconds), as
the engine itself would report them. A cluster labels every series with its ``replica``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
VLLM_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
VLLM_E2E = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
SGLANG_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0,
               20.0, 25.0, 30.0)
SGLANG_TPOT = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.15, 0.2, 0.3,
               0.4, 0.6, 0.8, 1.0, 2.0)
SGLANG_E2E = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0, 200.0, 250.0, 300.0)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, x: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, x)] += 1
        self.total += x
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, cum = [], 0
        for b, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cum += c
            le = "+Inf" if b == float("inf") else repr(float(b))
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {cum}')
        out += [f"{name}_sum{{{labels}}} {self.total!r}", f"{name}_count{{{labels}}} {self.n}"]
        return out


@dataclass
class ReplicaStats:
    """What one replica's metrics count beyond the scheduler's own state."""

    ttft: Histogram
    tpot: Histogram
    e2e: Histogram
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    aborted: int = 0

    @classmethod
    def for_family(cls, family: str) -> ReplicaStats:
        sg = family == "sglang"
        return cls(Histogram(SGLANG_TTFT if sg else VLLM_TTFT), Histogram(SGLANG_TPOT if sg else VLLM_TPOT),
                   Histogram(SGLANG_E2E if sg else VLLM_E2E))


@dataclass(frozen=True)
class Gauges:
    running: int
    waiting: int
    kv_usage: float
    used_tokens: int
    preemptions: int
    hit_tokens: int
    query_tokens: int


def exposition(family: str, version: str, model: str, gauges: list[Gauges], stats: list[ReplicaStats]) -> str:
    """The Prometheus text format of every replica's series."""
    many = len(gauges) > 1
    lines: list[str] = []
    for k, (g, s) in enumerate(zip(gauges, stats, strict=True)):
        labels = f'model_name="{model}"' + (f',replica="{k}"' if many else "")
        body = _sglang(g, s, version) if family == "sglang" else _vllm(g, s, family)
        for kind, name, value in body[0]:
            family_name = name.removesuffix("_total") if kind == "counter" else name
            lines.append(f"# TYPE {family_name} {kind}")
            lines.append(f"{name}{{{labels}}} {value!r}" if isinstance(value, float) else f"{name}{{{labels}}} {value}")
        for name, h in body[1]:
            lines.append(f"# TYPE {name} histogram")
            lines.extend(h.lines(name, labels))
    return "\n".join(lines) + "\n"


Series = tuple[list[tuple[str, str, float | int]], list[tuple[str, Histogram]]]


def _vllm(g: Gauges, s: ReplicaStats, family: str) -> Series:
    v1 = family == "vllm-v1"
    rate = g.hit_tokens / g.query_tokens if g.query_tokens else 0.0
    scalars: list[tuple[str, str, float | int]] = [
        ("gauge", "vllm:num_requests_running", g.running), ("gauge", "vllm:num_requests_waiting", g.waiting),
        ("gauge", "vllm:kv_cache_usage_perc" if v1 else "vllm:gpu_cache_usage_perc", float(g.kv_usage)),
        ("counter", "vllm:num_preemptions_total", g.preemptions),
        ("counter", "vllm:prompt_tokens_total", s.prompt_tokens),
        ("counter", "vllm:generation_tokens_total", s.generation_tokens),
        ("counter", "vllm:request_success_total", s.finished)]
    if v1:
        scalars += [("counter", "vllm:prefix_cache_queries_total", g.query_tokens),
                    ("counter", "vllm:prefix_cache_hits_total", g.hit_tokens)]
    else:
        scalars.append(("gauge", "vllm:gpu_prefix_cache_hit_rate", float(rate)))
    hists = [("vllm:time_to_first_token_seconds", s.ttft), ("vllm:time_per_output_token_seconds", s.tpot),
             ("vllm:e2e_request_latency_seconds", s.e2e)]
    return scalars, hists


def _sglang(g: Gauges, s: ReplicaStats, version: str) -> Series:
    rate = g.hit_tokens / g.query_tokens if g.query_tokens else 0.0
    scalars: list[tuple[str, str, float | int]] = [
        ("gauge", "sglang:num_running_reqs", g.running), ("gauge", "sglang:num_queue_reqs", g.waiting),
        ("gauge", "sglang:num_used_tokens", g.used_tokens), ("gauge", "sglang:token_usage", float(g.kv_usage)),
        ("gauge", "sglang:cache_hit_rate", float(rate)),
        ("counter", "sglang:prompt_tokens_total", s.prompt_tokens),
        ("counter", "sglang:generation_tokens_total", s.generation_tokens)]
    if not version.startswith("0.4"):
        scalars += [("counter", "sglang:cached_tokens_total", g.hit_tokens),
                    ("gauge", "sglang:num_retracted_reqs", g.preemptions)]
    hists = [("sglang:time_to_first_token_seconds", s.ttft), ("sglang:time_per_output_token_seconds", s.tpot),
             ("sglang:e2e_request_latency_seconds", s.e2e)]
    return scalars, hists
