"""``servetwin serve``: the simulated engine behind an OpenAI-compatible HTTP API (aiohttp).

One asyncio loop holds the server and the simulation. A request enters the twin at the virtual time it
arrived; a driver task advances the twin to the virtual clock's reading whenever the next simulated event is
due, and each token goes to its stream the moment the twin emits it. ``lags`` keeps, per token, how late (wall
seconds) it was handed to its stream after the instant the virtual clock passed its emission time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from aiohttp import web

from serve.clock import VirtualClock
from serve.metrics import Gauges, ReplicaStats, exposition
from serve.tokens import FILLER, PromptError, Tokens
from serve.twin import Twin, TwinSpec
from simulator.request import Request

DONE = b"data: [DONE]\n\n"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
EARLY_S = 0.001          # wake this much before a simulated event is due


class BadRequest(Exception):
    pass


class Server:
    def __init__(self, spec: TwinSpec, speedup: float = 1.0, model_name: str | None = None,
                 tokenizer: str | None = None, default_max_tokens: int = 16, check_every: int = 0):
        self.spec = spec
        self.twin = Twin(spec, self._token, check_every)
        self.twin.on_done = self._done
        self.clock = VirtualClock(speedup)
        self.model_name = model_name or spec.model
        self.tokens = Tokens(self.twin.mp.vocab, tokenizer)
        self.filler_id = int(self.tokens.text(FILLER)[-1]) if self.tokens.tok is None else int(
            self.tokens.tok(FILLER, add_special_tokens=False)["input_ids"][-1])
        self.default_max_tokens = default_max_tokens
        self.stats = [ReplicaStats.for_family(s.family) for s in self.twin.schedulers]
        self.streams: dict[int, asyncio.Queue[float | None]] = {}
        self.lags: list[float] = []
        self._wake = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self.refused = 0
        self.failed = 0                               # requests answered 500 (an unexpected failure)
        self.client_ids: list[str | None] = []       # each served request's X-Request-Id, where the client sent one

    # --- the simulation's side -------------------------------------------------------------------
    def _replica(self, r: Request) -> int:
        return self.twin.cluster.where.get(r.idx, 0) if self.twin.cluster is not None else 0

    def _token(self, r: Request, t: float) -> None:
        self.lags.append(time.monotonic() - self.clock.wall_at(t))
        s = self.stats[self._replica(r)]
        s.generation_tokens += 1
        times = r.token_times or []
        if r.output_len == 1:
            s.ttft.observe(t - r.send_s)
        elif len(times) >= 2:
            s.tpot.observe(times[-1] - times[-2])
        q = self.streams.get(r.idx)
        if q is not None:
            q.put_nowait(t)

    def _done(self, r: Request) -> None:
        s = self.stats[self._replica(r)]
        if r.is_finished and not r.error:
            s.finished += 1
            s.e2e.observe(r.last_token_s - r.send_s)
        elif r.idx in self.twin.aborted:
            s.aborted += 1
        q = self.streams.get(r.idx)
        if q is not None:
            q.put_nowait(None)

    async def drive(self) -> None:
        """Advance the twin as the virtual clock passes its next event; sleep until then or a new arrival."""
        twin, clock = self.twin, self.clock
        while True:
            nxt = twin.next_event()
            if nxt <= clock.now():
                twin.run_until(clock.now())
                await asyncio.sleep(0)
                continue
            self._wake.clear()
            if math.isinf(nxt):
                await self._wake.wait()
                continue
            wait = clock.wait_for(nxt)
            if wait <= EARLY_S:                  # the loop's timers fire up to a millisecond late: spin the rest
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait - EARLY_S)

    def submit(self, prompt: Any, max_tokens: int) -> tuple[Request, asyncio.Queue[float | None]]:
        r = self.twin.submit(prompt, max_tokens, self.clock.now())
        q: asyncio.Queue[float | None] = asyncio.Queue()
        self.streams[r.idx] = q
        s = self.stats[self._replica(r)] if self.twin.cluster is not None else self.stats[0]
        s.prompt_tokens += r.prompt_len
        self._wake.set()
        return r, q

    # --- HTTP ------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        @web.middleware
        async def one_line_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
            """An unexpected failure answers 500 with one line naming it (never a traceback to the client)."""
            try:
                return await handler(request)
            except (web.HTTPException, asyncio.CancelledError, ConnectionError):
                raise
            except Exception as err:
                self.failed += 1
                why = " ".join(f"{type(err).__name__}: {err}".split())[:300]
                return web.json_response({"object": "error", "message": f"internal error: {why}",
                                          "type": "InternalServerError", "code": 500}, status=500)

        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[one_line_errors])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    def warm_up(self) -> None:
        """Serve a few requests on a private copy of the twin before listening: the first call of every
        compiled kernel and lazily imported path is paid here, not by a client's first requests."""
        twin = Twin(self.spec, lambda _r, _t: None)
        rng = np.random.default_rng(0)
        prefix = rng.integers(256, self.twin.mp.vocab, 300, dtype=np.int32)
        for k in range(8):
            own = rng.integers(256, self.twin.mp.vocab, 40 + 10 * k, dtype=np.int32)
            twin.submit(np.concatenate([prefix, own]), 4, 0.01 * k)
        twin.env.run()
        twin.check_integrity()

    async def _start(self, _app: web.Application) -> None:
        self.warm_up()
        gc.collect()
        gc.freeze()           # what exists at start (simulator, profiles, libraries) is never scanned again
        self.clock = VirtualClock(self.clock.speedup)
        self._driver = asyncio.get_running_loop().create_task(self.drive())

    async def _stop(self, _app: web.Application) -> None:
        if self._driver is not None:
            self._driver.cancel()

    async def health(self, _req: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": 0, "owned_by": "servetwin",
            "root": self.model_name, "max_model_len": self.twin.context_limit}]})

    async def metrics(self, _req: web.Request) -> web.Response:
        gauges = []
        for s in self.twin.schedulers:
            c = s.counters
            used = s.distinct_kv_tokens()
            gauges.append(Gauges(len(s.running), len(s.waiting), s.kv_usage(), max(used, 0), c.preemptions,
                                 c.prefix_hit_tokens, c.prefix_query_tokens))
        cfg = self.twin.cfgs[0]
        text = exposition(self.twin.family, str(getattr(cfg, "version", "")), self.model_name, gauges, self.stats)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def completions(self, req: web.Request) -> web.StreamResponse:
        return await self._request(req, chat=False)

    async def chat(self, req: web.Request) -> web.StreamResponse:
        return await self._request(req, chat=True)

    async def _request(self, req: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await _json(req)
            prompt = (self.tokens.chat_prompt(body.get("messages")) if chat
                      else self.tokens.completion_prompt(body.get("prompt")))
        except (BadRequest, PromptError) as err:
            return self._refuse(str(err))
        return await self._serve(req, body, prompt, chat=chat)

    def _refuse(self, why: str, status: int = 400) -> web.Response:
        self.refused += 1
        return web.json_response({"object": "error", "message": why, "type": "BadRequestError", "code": status},
                                 status=status)

    def _max_tokens(self, body: dict[str, Any], prompt_len: int, chat: bool) -> int:
        raw = body.get("max_completion_tokens", body.get("max_tokens")) if chat else body.get("max_tokens")
        n = self.default_max_tokens if raw is None else raw
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadRequest(f"max_tokens {raw!r}: expected a whole number ≥ 1")
        if int(body.get("n", 1) or 1) != 1:
            raise BadRequest("n: only one choice per request is served")
        limit = self.twin.context_limit
        if prompt_len + n > limit:
            raise BadRequest(f"This model's maximum context length is {limit} tokens. However, you requested "
                             f"{prompt_len + n} tokens ({prompt_len} in the prompt, {n} in the completion).")
        return n

    async def _serve(self, req: web.Request, body: dict[str, Any], prompt: Any, chat: bool) -> web.StreamResponse:
        try:
            max_tokens = self._max_tokens(body, int(prompt.size), chat)
        except BadRequest as err:
            return self._refuse(str(err))
        r, q = self.submit(prompt, max_tokens)
        self.client_ids.append(req.headers.get("X-Request-Id"))
        fmt = _Format(r, self.model_name, chat, bool(body.get("return_token_ids")), self.filler_id,
                      bool((body.get("stream_options") or {}).get("include_usage")))
        try:
            if body.get("stream"):
                return await self._stream(req, r, q, fmt)
            while await q.get() is not None:
                pass
            if r.error:
                return web.json_response(fmt.error(r.error), status=400 if "admitted" in r.error else 500)
            return web.json_response(fmt.whole())
        except (ConnectionError, asyncio.CancelledError):
            self.twin.abort(r)
            self._wake.set()
            raise
        finally:
            self.streams.pop(r.idx, None)

    async def _stream(self, req: web.Request, r: Request, q: asyncio.Queue[float | None],
                      fmt: _Format) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(req)
        while await q.get() is not None:
            await resp.write(fmt.chunk())
        if r.error:
            await resp.write(_sse(fmt.error(r.error)))
        else:
            await resp.write(fmt.last())
        await resp.write(DONE)
        await resp.write_eof()
        return resp


async def _json(req: web.Request) -> dict[str, Any]:
    try:
        body = await req.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("request body: not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body: expected a JSON object")
    return body


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Format:
    """The OpenAI response shapes, as vLLM's and SGLang's servers write them."""

    def __init__(self, r: Request, model: str, chat: bool, token_ids: bool, filler_id: int, usage: bool):
        self.r, self.model, self.chat, self.token_ids = r, model, chat, token_ids
        self.filler_id, self.usage = filler_id, usage
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{r.idx}"
        self.created = int(time.time())
        self.obj = "chat.completion" if chat else "text_completion"
        self.sent = 0

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _usage(self) -> dict[str, Any]:
        r = self.r
        return {"prompt_tokens": r.prompt_len, "completion_tokens": r.output_len,
                "total_tokens": r.prompt_len + r.output_len,
                "prompt_tokens_details": {"cached_tokens": max(r.cached_tokens, 0)}}

    def chunk(self) -> bytes:
        """The stream's chunk for the next token (one token per chunk, as both engines stream here)."""
        self.sent += 1
        out = b""
        if self.chat:
            if self.sent == 1:
                out += _sse({**self._head("chat.completion.chunk"), "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
            ch: dict[str, Any] = {"index": 0, "delta": {"content": FILLER}, "finish_reason": None}
        else:
            ch = {"index": 0, "text": FILLER, "logprobs": None, "finish_reason": None}
        if self.token_ids:
            ch["token_ids"] = [self.filler_id]
        return out + _sse({**self._head("chat.completion.chunk" if self.chat else "text_completion"),
                           "choices": [ch]})

    def last(self) -> bytes:
        key = "delta" if self.chat else "text"
        fin = {"index": 0, key: {"content": ""} if self.chat else "", "finish_reason": "length"}
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = _sse({**self._head(obj), "choices": [fin]})
        if self.usage:
            out += _sse({**self._head(obj), "choices": [], "usage": self._usage()})
        return out

    def whole(self) -> dict[str, Any]:
        text = FILLER * self.r.output_len
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"} if self.chat else
                                  {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
        return {**self._head(self.obj), "choices": [choice], "usage": self._usage()}

    def error(self, why: str) -> dict[str, Any]:
        return {"object": "error", "message": why, "type": "BadRequestError", "code": 400}
