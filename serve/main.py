"""Start, run and stop a server: in the foreground (``servetwin serve``, until SIGINT or SIGTERM, then the record
is written) or in a background thread (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from serve.app import Server
from serve.record import lag_summary, served_record, served_trace, write_served


@dataclass(frozen=True)
class Listen:
    host: str = "127.0.0.1"
    port: int = 8000


async def start(server: Server, listen: Listen) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, listen.host, listen.port)
    await site.start()
    port = int(runner.addresses[0][1]) if runner.addresses else listen.port
    return runner, port


def serve_meta(server: Server) -> dict[str, Any]:
    return {"speedup": server.clock.speedup, "release_lag_s": lag_summary(server.lags),
            "refused": server.refused, "failed": server.failed, "tokenizer": server.tokens.tok is not None,
            "model_name": server.model_name, "x_request_ids": server.client_ids}


def save(server: Server, out: str | Path) -> Path | None:
    """The record of what was served (None: nothing was served, nothing written)."""
    if not server.twin.requests:
        return None
    trace = served_trace(server.twin)
    return write_served(out, served_record(server.twin, trace, serve_meta(server)), trace)


def run_foreground(server: Server, listen: Listen, on_ready: Any = None) -> None:
    async def main() -> None:
        runner, port = await start(server, listen)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if on_ready is not None:
            on_ready(port)
        await stop.wait()
        await runner.cleanup()
    asyncio.run(main())


class Background:
    """A server on its own event loop in a daemon thread: ``with Background(server) as b: b.url``."""

    def __init__(self, server: Server, listen: Listen = Listen(port=0)):
        self.server, self.listen = server, listen
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.listen.host}:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner, self.port = self._loop.run_until_complete(start(self.server, self.listen))
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> Background:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the server did not start within 30 s")
        return self

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the server's loop and return its result (the twin is not thread-safe)."""
        return asyncio.run_coroutine_threadsafe(_call(fn), self._loop).result(30)

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


async def _call(fn: Any) -> Any:
    return fn()
