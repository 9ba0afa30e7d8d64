"""Benchmark: `servetwin serve` under load — 50 requests/s held for 30 s of wall time with ~500 streams open,
at speed-up 1 and 10. Reported from the server's own record: the release lag (how late each token reached its
stream after the virtual clock passed its emission), the most streams open at once, and the server's and the
client's CPU time per wall second. The client is this process (aiohttp, one connection per stream)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from analysis.records import read_run

TOKENS = {1.0: 480, 10.0: 480}


async def _load(url: str, rate: float, duration: float, max_tokens: int) -> int:
    rng = np.random.default_rng(0)
    gaps = rng.exponential(1 / rate, int(rate * duration * 1.2))
    ok = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(url, connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
        async def one(k: int) -> None:
            nonlocal ok
            body = {"prompt": [1000 + k % 50] * 64, "max_tokens": max_tokens, "stream": True}
            async with s.post("/v1/completions", json=body) as r:
                async for _ in r.content:
                    pass
                ok += r.status == 200
        tasks, t0, at = [], time.monotonic(), 0.0
        for k, g in enumerate(gaps):
            at += g
            if at > duration:
                break
            await asyncio.sleep(max(t0 + at - time.monotonic(), 0))
            tasks.append(asyncio.create_task(one(k)))
        await asyncio.gather(*tasks)
    return ok


def _open_streams(rec_dir: Path) -> int:
    r = read_run(rec_dir).requests
    ev = np.concatenate([np.stack([r.send_s, np.ones(len(r))], 1), np.stack([r.last_token_s, -np.ones(len(r))], 1)])
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]
    return int(np.cumsum(ev[:, 1]).max())


def run(speedup: float, rate: float = 50.0, duration: float = 30.0) -> dict:
    tokens = TOKENS[speedup]                            # ~10 s of wall time per stream on the H100 twin
    with tempfile.TemporaryDirectory() as d:
        rec = Path(d) / "rec"
        proc = subprocess.Popen([sys.executable, "-m", "servetwin.cli", "serve", "--engine", "vllm-v1", "--hardware",
                                 "h100", "--port", "0", "--speedup", str(speedup), "--record", str(rec)],
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" at ")[1].split("/v1")[0]
        c0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        ok = asyncio.run(_load(url, rate, duration, tokens))
        wall = time.monotonic() - t0
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        server_cpu = _cpu_of(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        meta = read_run(rec / "run").meta
        lag = meta["serve"]["release_lag_s"]
        return {"bench": "serve", "speedup": speedup, "rate": rate, "requests_ok": ok, "max_tokens": tokens,
                "streams_open_max": _open_streams(rec / "run"), "release_lag_p50_ms": lag["p50_s"] * 1e3,
                "release_lag_p99_ms": lag["p99_s"] * 1e3, "release_lag_max_ms": lag["max_s"] * 1e3,
                "tokens_per_wall_s": lag["tokens"] / wall, "server_cpu_per_wall_s": server_cpu / wall,
                "client_cpu_per_wall_s": (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / wall}


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    for k in (1.0, 10.0):
        print(json.dumps(run(k)), flush=True)
