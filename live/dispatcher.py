"""Replay a Trace against an OpenAI-compatible endpoint on an absolute schedule.

Roots are sent at their planned time from the run's start (no drift: each wait targets an absolute
``perf_counter`` deadline); a dependant is sent when its last predecessor completes plus its tool
delay. Each request is a streaming completion; every chunk's arrival time is recorded. Errors are
recorded per request by kind and the run goes on.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from live.gc_pacer import GcPacer, SendSchedule
from live.records import JsonlSink, LiveRequest
from live.sse import MalformedStream, chunk_tokens, events
from scenarios.trace import Trace

ERROR_KINDS = ("connect", "http_4xx", "http_5xx", "reset", "malformed", "stall", "timeout", "too_many_tokens",
               "short", "cancelled")


@dataclass
class DispatchConfig:
    endpoint: str
    model: str
    api: str = "completions"              # or "chat" (text prompts with exact token counts)
    timeout_s: float = 300.0              # whole request
    stall_s: float = 300.0                # no chunk for this long → stall
    warmup: int = 20
    api_key_env: str | None = "OPENAI_API_KEY"
    return_token_ids: bool = True
    ignore_eos: bool = True
    max_connections: int = 1024
    gc_pacing: bool = True                # run the garbage collector only between planned sends
    text_prompts: Callable[[int], str] | None = None   # chat (or completions): request index → prompt text
    request_id_prefix: str | None = None  # send X-Request-Id PREFIX-<request index> (a router logs it)
    extra: dict[str, Any] = field(default_factory=dict)

    def headers(self, request: int | None = None) -> dict[str, str]:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        out = {"Authorization": f"Bearer {key}"} if key else {}
        if self.request_id_prefix is not None and request is not None:
            out["X-Request-Id"] = f"{self.request_id_prefix}-{request}"
        return out


def _body(cfg: DispatchConfig, prompt: list[int] | str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": cfg.model, "max_tokens": max_tokens, "stream": True, "temperature": 0.0,
                            "stream_options": {"include_usage": True}, **cfg.extra}
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.return_token_ids:
        body["return_token_ids"] = True
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


async def stream_one(client: httpx.AsyncClient, cfg: DispatchConfig, rec: LiveRequest, prompt: list[int] | str,
                     t0: float) -> LiveRequest:
    """Send one request and fill rec; never raises for server or network faults."""
    path = "/v1/chat/completions" if cfg.api == "chat" else "/v1/completions"
    rec.send_s = time.perf_counter() - t0
    usage_tokens: int | None = None
    try:
        async with asyncio.timeout(cfg.timeout_s):
            async with client.stream("POST", cfg.endpoint.rstrip("/") + path,
                                     json=_body(cfg, prompt, rec.max_tokens),
                                     headers=cfg.headers(rec.request_id)) as resp:
                if resp.status_code >= 400:
                    body = (await resp.aread()).decode("utf-8", "replace")
                    rec.error = "http_4xx" if resp.status_code < 500 else "http_5xx"
                    rec.detail = f"HTTP {resp.status_code}: {body[:500]}"
                    return rec
                loop = asyncio.get_running_loop()
                stalled = False
                try:
                    # Re-armed lazily (at most once per `grace`): fires between stall_s and stall_s + grace
                    # after the last chunk, never early, without a new timer per chunk.
                    grace = min(1.0, 0.1 * cfg.stall_s)
                    async with asyncio.timeout_at(loop.time() + cfg.stall_s + grace) as watchdog:
                        async for obj in events(resp.aiter_bytes()):
                            if (when := watchdog.when()) is not None and when - loop.time() < cfg.stall_s:
                                watchdog.reschedule(loop.time() + cfg.stall_s + grace)
                            now = time.perf_counter() - t0
                            if obj is None:
                                break
                            usage_tokens = _take(rec, obj, now, usage_tokens)
                except TimeoutError:
                    stalled = True
                if stalled:
                    rec.error, rec.detail = "stall", f"no chunk for at least {cfg.stall_s} s"
                    return rec
    except TimeoutError:
        rec.error, rec.detail = "timeout", f"request exceeded {cfg.timeout_s} s"
    except httpx.ConnectError as err:
        rec.error, rec.detail = "connect", str(err)[:200]
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as err:
        rec.error, rec.detail = "reset", f"{type(err).__name__}: {str(err)[:200]}"
    except MalformedStream as err:
        rec.error, rec.detail = "malformed", str(err)
    except asyncio.CancelledError:
        rec.error, rec.detail = "cancelled", "run interrupted"
        raise
    finally:
        _finish(rec, usage_tokens)
    return rec


def _take(rec: LiveRequest, obj: dict[str, Any], now: float, usage_tokens: int | None) -> int | None:
    """Record one chunk: its time and tokens; the usage block when it comes."""
    usage = obj.get("usage")
    if usage:
        usage_tokens = int(usage.get("completion_tokens", 0))
        rec.server_prompt_tokens = int(usage.get("prompt_tokens", -1))
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            rec.cached_tokens = float(details["cached_tokens"])
    n = chunk_tokens(obj)
    if n:
        if not rec.chunk_times:
            rec.first_token_s = now
        rec.chunk_times.append(now)
        rec.chunk_tokens.append(n)
        rec.last_token_s = now
    return usage_tokens


def _finish(rec: LiveRequest, usage_tokens: int | None) -> None:
    counted = int(sum(rec.chunk_tokens))
    rec.output_tokens = usage_tokens if usage_tokens is not None else counted
    if rec.error:
        return
    if rec.output_tokens > rec.max_tokens:
        rec.error, rec.detail = "too_many_tokens", f"{rec.output_tokens} tokens for max_tokens {rec.max_tokens}"
    elif rec.output_tokens < rec.max_tokens or not rec.chunk_times:
        rec.error, rec.detail = "short", f"{rec.output_tokens} of {rec.max_tokens} tokens (ignore_eos unsupported?)"
    else:
        rec.ok = True


class Replay:
    """One run: warm-up requests, then the trace on its schedule; records go to ``sink`` as they finish."""

    def __init__(self, trace: Trace, cfg: DispatchConfig, sink: JsonlSink,
                 client: httpx.AsyncClient | Sequence[httpx.AsyncClient]):
        self.trace, self.cfg, self.sink = trace, cfg, sink
        self.clients = [client] if isinstance(client, httpx.AsyncClient) else list(client)
        a = trace.arrays
        self.pending = np.diff(a["pred_offsets"]).astype(np.int64)
        self.succ = trace.successors()
        self.lens = trace.prompt_lengths()
        self.tasks: set[asyncio.Task[None]] = set()
        self.done = 0
        self.t0 = 0.0
        self.schedule = SendSchedule()
        self.pacer: GcPacer | None = GcPacer(self.schedule) if cfg.gc_pacing else None
        # the scenario's client.max_concurrency: a semaphore before the send (its send time and timeout start past it)
        n = trace.max_concurrency
        self.slots: asyncio.Semaphore | None = asyncio.Semaphore(n) if n is not None else None

    def _prompt(self, i: int) -> list[int] | str:
        if self.cfg.api == "chat" or self.cfg.text_prompts is not None:
            assert self.cfg.text_prompts is not None, "chat needs text prompts"
            return self.cfg.text_prompts(i)
        return [int(x) for x in self.trace.prompt(i)]

    async def warmup(self) -> None:
        """Requests whose results are discarded (distinct prompts, so they do not warm the prefix cache)."""
        rng = np.random.default_rng(12345)
        for k in range(self.cfg.warmup):
            prompt = [int(x) for x in rng.integers(3, 1000, size=64)]
            rec = LiveRequest(-1 - k, -1, "warmup", 0.0, 64, 8, warmup=True)
            text = self.cfg.api == "chat" or self.cfg.text_prompts is not None
            await stream_one(self.clients[0], self.cfg, rec, f"warm up {k}: {prompt}" if text else prompt, 0.0)

    async def _request(self, i: int, planned: float) -> None:
        a = self.trace.arrays
        rec = LiveRequest(i, int(a["dag"][i]), self.trace.role_name(i), planned, int(self.lens[i]),
                          int(a["max_tokens"][i]))
        try:
            if self.slots is not None:
                async with self.slots:
                    await stream_one(self.clients[i % len(self.clients)], self.cfg, rec, self._prompt(i), self.t0)
            else:
                await stream_one(self.clients[i % len(self.clients)], self.cfg, rec, self._prompt(i), self.t0)
        finally:
            self.sink.write(rec)
            self.done += 1
        finished = time.perf_counter() - self.t0
        for s in self.succ[i]:
            self.pending[s] -= 1
            if self.pending[s] == 0:
                self._spawn(s, finished + float(a["delay_s"][s]))

    def _spawn(self, i: int, planned: float) -> None:
        self.schedule.plan(i, self.t0 + planned)
        task = asyncio.create_task(self._at(i, planned))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _at(self, i: int, planned: float) -> None:
        target = self.t0 + planned
        try:
            while (delay := target - time.perf_counter()) > 0:     # timers may fire early: never send early
                await asyncio.sleep(delay)
        finally:
            self.schedule.sent(i)
        await self._request(i, planned)

    def start_clock(self) -> float:
        """Freeze what exists now out of the collector's reach (when pacing), then start the run's clock."""
        if self.pacer:
            self.pacer.freeze()
        self.t0 = time.perf_counter()
        return self.t0

    async def run(self) -> None:
        """Replay the trace; the clock starts here unless ``start_clock`` was called."""
        a = self.trace.arrays
        roots = self.trace.roots()
        planned = a["arrival_s"][roots] + a["delay_s"][roots]
        if not self.t0:
            self.start_clock()
        for i, p in sorted(zip(roots.tolist(), planned.tolist(), strict=True), key=lambda x: (x[1], x[0])):
            self._spawn(i, float(p))
        stop = asyncio.Event()
        pacing = asyncio.create_task(self.pacer.run(stop)) if self.pacer else None
        try:
            while self.tasks:
                await asyncio.gather(*list(self.tasks), return_exceptions=True)
        finally:
            stop.set()
            if pacing:
                await pacing
