"""What a router and text prompts add to a request's way in, measured on idle engines.

Lone requests of a trace's own prompts are sent three ways: as token ids straight to an engine (how the probes
that priced the twin's steps were sent), as text of the same token count straight to the engine, and as that
text through the router. Before every request each engine's prefix cache is emptied, so all three prefill the
same prompt cold; the three ways take turns, their order rotated from prompt to prompt. The median TTFT
differences, paired by prompt, are what text costs the engine's front end (its tokenisation: a twin's front-end latency
``request_s``) and the router's own latency (the simulated router's ``latency_s``). A difference below zero is
noise around zero and is reported as measured; users of the numbers clip it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
import numpy as np

from live.dispatcher import DispatchConfig, stream_one
from live.records import LiveRequest
from live.run import reset_prefix_cache
from scenarios.trace import Trace

WAYS = ("ids", "text", "routed")


@dataclass(frozen=True)
class RouteLatency:
    text_s: float                      # median over prompts of TTFT(text, direct) − TTFT(token ids, direct)
    router_s: float                    # median over prompts of TTFT(text, routed) − TTFT(text, direct)
    ttft_s: dict[str, list[float]]     # each way's lone TTFT per prompt, in the order sent (nan: failed)

    def counts(self) -> dict[str, int]:
        """Each way's lone requests that got a first token."""
        return {k: int(np.isfinite(np.asarray(v)).sum()) for k, v in self.ttft_s.items()}

    def summary(self) -> dict[str, object]:
        def quartiles(d: np.ndarray) -> list[float]:
            d = d[np.isfinite(d)]
            return [float(x) for x in np.percentile(d, [25, 75])] if d.size else [math.nan, math.nan]
        t = {k: np.asarray(v) for k, v in self.ttft_s.items()}
        return {"text_s": self.text_s, "router_s": self.router_s,
                "text_s_quartiles": quartiles(t["text"] - t["ids"]),
                "router_s_quartiles": quartiles(t["routed"] - t["text"]),
                "median_ttft_s": {k: float(np.nanmedian(v)) for k, v in t.items()},
                "requests_per_way": self.counts(),
                "ttft_s": {k: [round(float(x), 6) for x in v] for k, v in t.items()}}


async def _lone(client: httpx.AsyncClient, endpoint: str, model: str, prompt: list[int] | str,
                tokens: int) -> float:
    cfg = DispatchConfig(endpoint=endpoint, model=model, warmup=0, timeout_s=120.0, stall_s=120.0)
    rec = LiveRequest(0, 0, "probe", 0.0, tokens, 1)
    await stream_one(client, cfg, rec, prompt, time.perf_counter())
    return rec.first_token_s - rec.send_s if rec.ok else math.nan


async def _measure(trace: Trace, text: Callable[[int], str], engines: Sequence[str], router: str, model: str,
                   picks: Sequence[int]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {w: [] for w in WAYS}
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=10.0)) as client:
        for k, i in enumerate(picks):
            ids = [int(x) for x in trace.prompt(i)]
            for way in WAYS[k % 3:] + WAYS[:k % 3]:
                for e in engines:
                    await reset_prefix_cache(client, e)
                prompt: list[int] | str = ids if way == "ids" else text(i)
                direct = engines[k % len(engines)]
                out[way].append(await _lone(client, router if way == "routed" else direct, model, prompt, len(ids)))
    return out


def _paired(a: list[float], b: list[float]) -> float:
    d = np.asarray(a) - np.asarray(b)
    d = d[np.isfinite(d)]
    return float(np.median(d)) if d.size else math.nan


def measure(trace: Trace, text: Callable[[int], str], engines: Sequence[str], router: str, model: str,
            n: int = 24) -> RouteLatency:
    """``n`` prompts spread over the trace, each sent the three ways (the direct ones to each engine in turn);
    the differences are paired by prompt, so the prompts' own spread cancels."""
    picks = sorted({int(x) for x in np.linspace(0, trace.n_requests - 1, n)})
    ttft = asyncio.run(_measure(trace, text, engines, router, model, picks))
    return RouteLatency(_paired(ttft["text"], ttft["ids"]), _paired(ttft["routed"], ttft["text"]), ttft)
