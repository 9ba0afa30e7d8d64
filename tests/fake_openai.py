"""A minimal OpenAI-compatible streaming server on raw asyncio (HTTP/1.1 keep-alive, chunked SSE), for
testing the live client's control flow and measuring its dispatch lag without an engine. It serves
``/health``, ``/metrics``, ``/v1/models`` and streaming ``/v1/completions`` (one token per chunk every
``token_s``; a stream whose client goes away stops, as an engine aborts it); the first ``fail_first``
completions get HTTP 500."""

from __future__ import annotations

import asyncio
import json
import threading
import time


class FakeOpenAI:
    def __init__(self, token_s: float = 0.0, fail_first: int = 0):
        self.token_s, self.fail_first = token_s, fail_first
        self.completions = 0
        self.arrivals: list[float] = []      # wall time (time.time()) each completion request was read
        self.streamed: list[tuple[int, int]] = []     # per finished or abandoned stream: (max_tokens, tokens sent)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                method, path, _ = line.decode().split(" ", 2)
                length = 0
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode().partition(":")
                    if k.lower() == "content-length":
                        length = int(v.strip())
                body = await reader.readexactly(length) if length else b""
                await self._respond(method, path, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _respond(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter) -> None:
        if path.startswith("/v1/completions"):
            self.arrivals.append(time.time())
            self.completions += 1
            if self.completions <= self.fail_first:
                return self._plain(w, 500, "injected failure")
            req = json.loads(body)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            sent = 0
            try:
                for _ in range(int(req["max_tokens"])):
                    if self.token_s:
                        await asyncio.sleep(self.token_s)
                    self._chunk(w, 'data: {"choices":[{"index":0,"text":"x","token_ids":[5]}]}\n\n')
                    await w.drain()
                    sent += 1
            finally:
                self.streamed.append((int(req["max_tokens"]), sent))
            self._chunk(w, f'data: {{"choices":[],"usage":{{"completion_tokens":{req["max_tokens"]}}}}}\n\n')
            self._chunk(w, "data: [DONE]\n\n")
            w.write(b"0\r\n\r\n")
            await w.drain()
        elif path.startswith("/v1/models"):
            self._plain(w, 200, json.dumps({"data": [{"id": "fake"}]}), "application/json")
        elif path.startswith("/metrics"):
            self._plain(w, 200, "vllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0.1\n")
        else:
            self._plain(w, 200, "ok")

    @staticmethod
    def _chunk(w: asyncio.StreamWriter, s: str) -> None:
        b = s.encode()
        w.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")

    @staticmethod
    def _plain(w: asyncio.StreamWriter, code: int, text: str, ctype: str = "text/plain") -> None:
        b = text.encode()
        w.write(f"HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(b)}\r\n\r\n".encode() + b)

    def start(self) -> FakeOpenAI:
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=2048))
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            self._loop.run_forever()
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
