"""The live client's edges, where the edge is HTTP itself (httpx MockTransport): malformed streams,
resets, stalls, HTTP errors with bodies, a server ignoring max_tokens, the API key's handling."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from live.dispatcher import DispatchConfig, Replay, stream_one
from live.records import JsonlSink, LiveRequest, read_jsonl
from scenarios import compile_trace, scenario_from_dict

SECRET = "sk-test-very-secret-0123456789"


def chunk(text: str = "a", **extra: object) -> bytes:
    obj = {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text, "token_ids": [7]}], **extra}
    return f"data: {json.dumps(obj)}\n\n".encode()


def usage(n: int) -> bytes:
    return f'data: {{"choices": [], "usage": {{"completion_tokens": {n}, "prompt_tokens": 5}}}}\n\n'.encode()


def run_one(handler, max_tokens: int = 3, **cfg_over):  # type: ignore[no-untyped-def]
    cfg = DispatchConfig(endpoint="http://engine", model="m", timeout_s=5, stall_s=cfg_over.pop("stall_s", 5),
                         **cfg_over)
    rec = LiveRequest(0, 0, "worker", 0.0, 5, max_tokens)

    async def go() -> LiveRequest:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await stream_one(c, cfg, rec, [1, 2, 3, 4, 5], 0.0)
    return asyncio.run(go())


def stream(*parts: bytes, fail: Exception | None = None, sleep: float = 0.0):  # type: ignore[no-untyped-def]
    async def gen():  # type: ignore[no-untyped-def]
        for p in parts:
            yield p
        if sleep:
            await asyncio.sleep(sleep)
        if fail is not None:
            raise fail
    return gen()


def test_good_stream():
    parts = (chunk(), chunk(), chunk(), usage(3), b"data: [DONE]\n\n")
    rec = run_one(lambda r: httpx.Response(200, content=stream(*parts)))
    assert rec.ok and rec.output_tokens == 3 and len(rec.chunk_times) == 3 and rec.first_token_s <= rec.last_token_s


def test_malformed_sse():
    rec = run_one(lambda r: httpx.Response(200, content=stream(chunk(), b"data: {not json\n\n")))
    assert not rec.ok and rec.error == "malformed" and rec.output_tokens == 1


def test_reset_mid_stream():
    rec = run_one(lambda r: httpx.Response(200, content=stream(chunk(), fail=httpx.RemoteProtocolError("peer closed"))))
    assert rec.error == "reset" and len(rec.chunk_times) == 1


def test_stall():
    rec = run_one(lambda r: httpx.Response(200, content=stream(chunk(), sleep=3.0)), stall_s=0.2)
    assert rec.error == "stall"


def test_http_error_keeps_body():
    rec = run_one(lambda r: httpx.Response(503, text="engine overloaded: try later"))
    assert rec.error == "http_5xx" and "engine overloaded" in rec.detail
    rec = run_one(lambda r: httpx.Response(400, json={"error": "max_tokens too large"}))
    assert rec.error == "http_4xx" and "max_tokens too large" in rec.detail


def test_server_ignoring_max_tokens():
    rec = run_one(lambda r: httpx.Response(200, content=stream(*[chunk()] * 5, usage(5), b"data: [DONE]\n\n")))
    assert rec.error == "too_many_tokens"
    rec = run_one(lambda r: httpx.Response(200, content=stream(chunk(), usage(1), b"data: [DONE]\n\n")))
    assert rec.error == "short"


def test_unreachable_endpoint():
    cfg = DispatchConfig(endpoint="http://127.0.0.1:9", model="m", timeout_s=5)
    rec = LiveRequest(0, 0, "worker", 0.0, 5, 3)

    async def go() -> LiveRequest:
        async with httpx.AsyncClient() as c:
            return await stream_one(c, cfg, rec, [1], 0.0)
    assert asyncio.run(go()).error == "connect"


def test_api_key_sent_but_never_recorded(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SERVETWIN_TEST_KEY", SECRET)
    seen = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.headers.get("authorization"))
        return httpx.Response(401, text="bad key")
    rec = run_one(handler, api_key_env="SERVETWIN_TEST_KEY")
    assert seen == [f"Bearer {SECRET}"]
    sink = JsonlSink(tmp_path / "r.jsonl")
    sink.write(rec)
    sink.close()
    assert SECRET not in (tmp_path / "r.jsonl").read_text()


def _replay(t, handler, tmp_path: Path, cfg: DispatchConfig) -> list:  # type: ignore[no-untyped-def]
    """Replay trace t against a mock server answering with ``handler``; the records written."""
    sink = JsonlSink(tmp_path / "r.jsonl")

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            await Replay(t, cfg, sink, c).run()
    asyncio.run(go())
    sink.close()
    return read_jsonl(tmp_path / "r.jsonl")


def test_replay_keeps_records_when_the_server_fails(tmp_path: Path):
    """Every request of the trace gets a record, whatever the server does, and dependants still run."""
    t = compile_trace(scenario_from_dict({"duration_s": 20, "arrivals": {"kind": "constant", "rate": 0.5},
                                          "prompts": {"prefix_tokens": 8, "suffix_tokens": 4},
                                          "tools": {"mcp": {"kind": "constant", "median_s": 0.01, "p95_s": 0.02}}}))
    calls = {"n": 0}

    def handler(r: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            return httpx.Response(500, text="boom")
        body = json.loads(r.content)
        return httpx.Response(200, content=stream(*[chunk()] * body["max_tokens"], b"data: [DONE]\n\n"))
    rows = _replay(t, handler, tmp_path, DispatchConfig(endpoint="http://engine", model="m", warmup=0))
    assert len(rows) == t.n_requests
    assert {r["error"] for r in rows} == {"", "http_5xx"}
    lag = [r["send_s"] - r["planned_s"] for r in rows]
    assert min(lag) >= 0                      # never early (how late is a benchmark's business, not a test's)
    by_id = {r["request_id"]: r for r in rows}
    for i in range(t.n_requests):             # dependants planned after their predecessors finished
        for p in t.predecessors(i):
            done = by_id[int(p)]["last_token_s"] if by_id[int(p)]["ok"] else by_id[int(p)]["send_s"]
            assert by_id[i]["planned_s"] >= done


def test_a_semaphore_client_sends_at_most_its_limit_at_once(tmp_path: Path):
    """``client.max_concurrency``: the replay never has more streams open than that; a held request's send time
    is when it passed the semaphore."""
    t = compile_trace(scenario_from_dict({"duration_s": 20, "arrivals": {"kind": "constant", "rate": 1.0},
                                          "prompts": {"prefix_tokens": 8, "suffix_tokens": 4},
                                          "client": {"max_concurrency": 2},
                                          "tools": {"mcp": {"kind": "constant", "median_s": 0.01, "p95_s": 0.02}}}))
    live = {"now": 0, "peak": 0}

    async def handler(r: httpx.Request) -> httpx.Response:
        live["now"] += 1
        live["peak"] = max(live["peak"], live["now"])
        n = json.loads(r.content)["max_tokens"]

        async def body():  # type: ignore[no-untyped-def]
            for _ in range(n):
                await asyncio.sleep(0.002)
                yield chunk()
            live["now"] -= 1              # before the client can read the end, so before its slot frees
            yield b"data: [DONE]\n\n"
        return httpx.Response(200, content=body())
    rows = _replay(t, handler, tmp_path, DispatchConfig(endpoint="http://engine", model="m", warmup=0,
                                                        gc_pacing=False))
    assert len(rows) == t.n_requests and all(r["ok"] for r in rows)
    assert live["peak"] == 2


def _reset(handler):  # type: ignore[no-untyped-def]
    from live.run import reset_prefix_cache

    async def go() -> str:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await reset_prefix_cache(c, "http://engine", {"Authorization": "Bearer k"})
    return asyncio.run(go())


def test_prefix_cache_reset_retries_a_held_block_and_refuses_an_engine_without_one():
    import pytest

    from foundation.errors import ServetwinError
    calls: list[str] = []

    def vllm_busy_once(req: httpx.Request) -> httpx.Response:
        calls.append(req.url.path)
        assert req.headers["authorization"] == "Bearer k"              # the key goes with it
        return httpx.Response(200, json={"success": len(calls) > 1})   # a block still held, then free
    assert _reset(vllm_busy_once) == "/reset_prefix_cache" and len(calls) == 2
    assert _reset(lambda req: httpx.Response(404) if req.url.path == "/reset_prefix_cache"
                  else httpx.Response(200, text="Cache flushed.")) == "/flush_cache"       # SGLang
    with pytest.raises(ServetwinError, match="no prefix-cache reset endpoint.*VLLM_SERVER_DEV_MODE"):
        _reset(lambda req: httpx.Response(404))                        # vLLM without dev mode
    with pytest.raises(ServetwinError, match="did not empty its prefix cache.*HTTP 400"):
        _reset(lambda req: httpx.Response(404) if req.url.path == "/reset_prefix_cache"
               else httpx.Response(400, text="requests in flight"))
