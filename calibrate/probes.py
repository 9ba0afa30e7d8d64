"""Black-box probes through the API that isolate the cost model's terms:

- ``prefill``: one request at a time, unique (cache-busting) prompts of n tokens, 1 output token:
  TTFT ≈ one prefill step of n uncached tokens;
- ``cached``: a prompt of L tokens is sent once, then the same L tokens plus a unique suffix of d tokens:
  TTFT ≈ a prefill step of the uncached remainder over a cached context;
- ``decode``: c requests at once with unique prompts of P tokens, once with a short and once with a long
  output; the difference of their end-to-end times over the difference of their lengths ≈ one decode step
  of batch c at context P + (short + long) / 2. Differencing cancels the prefill and any coalescing of
  tokens into chunks by the server (vLLM's CPU build delivers whole runs of tokens in one chunk when its
  API process is starved of CPU, so chunk spacing does not show its decode steps). Two prompt lengths pin
  the cost of reading KV at long context. The same at 2,048 tokens whose first 1,843 are shared by the c
  requests (``new_tokens`` records the shared length): whether a context read by one sequence of a step is
  cheaper for the next (vLLM's CPU build reads shared blocks in place: 2–3× faster decode steps);
- ``mixed``: while c requests decode, one prompt of n uncached tokens arrives; the decode streams' time per
  token inside its prefill window ≈ the steps that carry its chunks (mixed with the decodes where the engine
  batches them together, prefill-only where it does not).

The whole plan is first run once unrecorded (``warm_passes``; its decode shapes with the short output
only, which meets every batch shape): an engine meeting a batch shape for the first time can be several
times slower (SGLang's CPU path: 30 ms → 0.3–1 s), which is not the steady cost the simulator models.
Each probe is then repeated; results are a RunRecord (``source: probe``) whose ``run.json`` lists every
probe request's kind and shape."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

from analysis.records import RunRecord, default_exclusion, write_run
from live.dispatcher import DispatchConfig, stream_one
from live.priority import client_scheduling
from live.records import LiveRequest
from live.run import capture_config, run_loop, wait_healthy

SETTLE_S = 1.0      # after a mixed probe's decodes are stopped: their aborts reach the engine's next step


@dataclass
class ProbePlan:
    prefill_lengths: tuple[int, ...] = (32, 128, 512, 1024, 2048, 4096)
    cached: tuple[tuple[int, int], ...] = ((512, 64), (2048, 64), (4096, 64), (4096, 512))
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    decode_prompt: int = 256
    decode_contexts: tuple[int, ...] = (256, 2048)     # prompt lengths of the decode probes
    decode_tokens: int = 128                          # the long output; the short one is a quarter of it
    mixed: tuple[tuple[int, int], ...] = ((2048, 4), (4096, 8))      # (prompt tokens, decoding requests)
    shared_decode: tuple[int, ...] = (8, 32)      # decode batches whose 2,048-token prompts share 90 %
    shared_prefix: int = 1843
    # (cached prefix, new tokens, k): k requests over one cached prefix sent at once to an idle engine —
    # what separates a prefill step's fixed cost from each prefilled request's (with lone prefills only,
    # the two are one number)
    batched: tuple[tuple[int, int, int], ...] = ()
    repeats: int = 3
    warm_passes: int = 1
    vocab: tuple[int, int] = (2, 4096)

    @classmethod
    def chunking(cls, repeats: int = 3) -> ProbePlan:
        """Only the shapes a chunk budget changes (lone prefills, cached-prefix prefills, a prefill among
        decodes): what a second configuration of the same engine adds to its fit."""
        return cls(decode_batches=(), shared_decode=(), repeats=repeats)


@dataclass
class ProbeRow:
    request_id: int
    kind: str
    new_tokens: int
    context: int
    concurrency: int
    repeat: int
    max_tokens: int = 1
    client_lag_s: float = 0.0           # the client's worst event-loop lag inside this probe's window


class Prober:
    def __init__(self, client: httpx.AsyncClient, cfg: DispatchConfig, plan: ProbePlan, seed: int | None = None):
        self.client, self.cfg, self.plan = client, cfg, plan
        self.rng = np.random.default_rng(seed)   # fresh entropy by default: prompts must miss every cache
        self.recs: list[LiveRequest] = []
        self.rows: list[ProbeRow] = []
        self.t0 = time.perf_counter()
        self._n = 0
        self.all_recs: list[LiveRequest] = []

    def _ids(self, n: int) -> list[int]:
        lo, hi = self.plan.vocab
        return [int(x) for x in self.rng.integers(lo, hi, size=n)]

    async def _send(self, prompt: list[int], max_tokens: int, row: ProbeRow | None) -> LiveRequest:
        rid = self._n
        self._n += 1
        rec = LiveRequest(rid, rid, "probe", time.perf_counter() - self.t0, len(prompt), max_tokens)
        self.all_recs.append(rec)                 # a stopped stream keeps the chunks it had
        await stream_one(self.client, self.cfg, rec, prompt, self.t0)
        if row is not None:
            row.request_id = rid
            self.recs.append(rec)
            self.rows.append(row)
        return rec

    async def run(self) -> None:
        for _ in range(2):                                   # warm-up, discarded
            await self._send(self._ids(64), 4, None)
        for _ in range(self.plan.warm_passes):               # every shape once, discarded
            await self._pass(None)
        for k in range(self.plan.repeats):
            await self._pass(k)

    async def _pass(self, k: int | None) -> None:
        """Every probe once; recorded as repeat k (None: a warm pass, not recorded)."""
        p = self.plan
        for n in p.prefill_lengths:
            await self._send(self._ids(n), 1, None if k is None else ProbeRow(0, "prefill", n, 0, 1, k))
        for L, d in p.cached:
            base = self._ids(L)
            await self._send(base, 1, None)                          # warm the prefix
            await self._send(base + self._ids(d), 1, None if k is None else ProbeRow(0, "cached", d, L, 1, k))
        short = max(2, p.decode_tokens // 4)
        outs = (short,) if k is None else (short, p.decode_tokens)   # a warm pass meets each batch shape once
        for prompt in p.decode_contexts:
            ctx = prompt + (short + p.decode_tokens) // 2
            for c in p.decode_batches:
                for out in outs:
                    rows = [None if k is None else ProbeRow(0, "decode", 1, ctx, c, k, out) for _ in range(c)]
                    await asyncio.gather(*[self._send(self._ids(prompt), out, r) for r in rows])
        prompt = p.decode_contexts[-1]
        ctx = prompt + (short + p.decode_tokens) // 2
        for c in p.shared_decode:
            for out in outs:
                pre = self._ids(p.shared_prefix)
                await self._send(pre, 1, None)                       # cache the shared prefix
                rows = [None if k is None else ProbeRow(0, "decode", p.shared_prefix, ctx, c, k, out) for _ in range(c)]
                await asyncio.gather(*[self._send(pre + self._ids(prompt - p.shared_prefix), out, r) for r in rows])
        for n, c in p.mixed:
            await self._mixed(n, c, -1 if k is None else k)
        for L, d, c in p.batched:
            base = self._ids(L)
            await self._send(base, 1, None)                          # warm the prefix
            await asyncio.sleep(0.2)                                 # an idle engine when they arrive
            rows = [None if k is None else ProbeRow(0, "batched", d, L, c, k) for _ in range(c)]
            await asyncio.gather(*[self._send(base + self._ids(d), 1, r) for r in rows])

    async def _mixed(self, n: int, c: int, k: int) -> None:
        """c long decodes; once they stream, a prompt of n tokens; the window's decode rate is recorded
        on the prompt's row (context = c, the decodes sharing its steps). The window ends with the prompt's
        first token, and so do the decodes: their streams are closed, which aborts them in the engine (both
        engines abort a request whose client disconnects), and the next probe waits ``SETTLE_S`` for an
        idle engine. Letting them run out cost SGLang's CPU path about 25 s of every pass."""
        longs = [asyncio.create_task(self._send(self._ids(self.plan.decode_prompt), 4 * self.plan.decode_tokens, None))
                 for _ in range(c)]
        await asyncio.sleep(0.5)
        await self._send(self._ids(n), 1, ProbeRow(0, "mixed", n, 0, c, k) if k >= 0 else None)
        for task in longs:
            task.cancel()
        await asyncio.gather(*longs, return_exceptions=True)
        await asyncio.sleep(SETTLE_S)

def _mixed_windows(pr: Prober, chunks: pd.DataFrame) -> dict[str, dict[str, float]]:
    """For each mixed probe: its prefill window and the decode streams' seconds per token inside it."""
    out: dict[str, dict[str, float]] = {}
    by_id = {r.request_id: r for r in pr.all_recs}
    for row in pr.rows:
        if row.kind != "mixed":
            continue
        r = by_id[row.request_id]
        lo, hi = r.send_s, r.first_token_s
        inside = chunks[(chunks["t_s"] > lo) & (chunks["t_s"] <= hi) & (chunks["request_id"] != r.request_id)]
        per_stream = inside.groupby("request_id")["tokens"].sum()
        tokens = float(per_stream.median()) if len(per_stream) else 0.0
        out[str(row.request_id)] = {"window_s": hi - lo, "decode_tokens_in_window": tokens}
    return out


def _frame(recs: list[LiveRequest]) -> tuple[pd.DataFrame, pd.DataFrame]:
    req = pd.DataFrame([{"request_id": r.request_id, "dag_id": r.dag_id, "role": "probe", "planned_s": r.planned_s,
                         "send_s": r.send_s, "first_token_s": r.first_token_s, "last_token_s": r.last_token_s,
                         "output_tokens": r.output_tokens, "prompt_tokens": r.prompt_tokens,
                         "cached_tokens": r.cached_tokens, "ok": r.ok, "error": r.error} for r in recs])
    ids, ts, ns = [], [], []
    for r in recs:
        ids += [r.request_id] * len(r.chunk_times)
        ts += r.chunk_times
        ns += r.chunk_tokens
    return req, pd.DataFrame({"request_id": np.asarray(ids, np.int64), "t_s": np.asarray(ts, float),
                              "tokens": np.asarray(ns, np.int64)})


class LagMonitor:
    """The client's own lag: a task that asks to wake every ``TICK_S`` and records how late it woke. A client
    kept off a CPU (an engine's busy threads on the same cores) wakes late for its sockets alike, so its
    timestamps carry that lateness; each probe records the worst lag inside its window."""

    TICK_S = 0.005

    def __init__(self, t0: float):
        self.t0 = t0
        self.times: list[float] = []
        self.lags: list[float] = []

    async def run(self) -> None:
        while True:
            due = time.perf_counter() + self.TICK_S
            await asyncio.sleep(self.TICK_S)
            now = time.perf_counter()
            self.times.append(now - self.t0)
            self.lags.append(max(0.0, now - due))

    def worst(self, lo: float, hi: float) -> float:
        t = np.asarray(self.times)
        inside = np.asarray(self.lags)[(t >= lo) & (t <= hi + self.TICK_S)]
        return float(inside.max()) if inside.size else 0.0

    def summary(self) -> dict[str, Any]:
        lag = np.asarray(self.lags) if self.lags else np.zeros(1)
        return {"p50_s": float(np.quantile(lag, 0.5)), "p99_s": float(np.quantile(lag, 0.99)),
                "max_s": float(lag.max()), "samples": len(self.lags), "tick_s": self.TICK_S,
                "scheduling": client_scheduling()}


async def _probe(endpoint: str, model: str, plan: ProbePlan, engine_log: str | None) -> tuple[Prober, dict,
                                                                                               LagMonitor]:
    cfg = DispatchConfig(endpoint=endpoint, model=model, warmup=0, timeout_s=120, stall_s=120)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120, connect=10)) as client:
        await wait_healthy(client, endpoint, 300)
        resolved = await capture_config(client, endpoint, engine_log)
        pr = Prober(client, cfg, plan)
        mon = LagMonitor(pr.t0)
        task = asyncio.create_task(mon.run())
        try:
            await pr.run()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return pr, resolved, mon


def probe(endpoint: str, model: str, out: str | Path, plan: ProbePlan | None = None,
          engine_log: str | None = None, label: str = "probe") -> RunRecord:
    plan = plan or ProbePlan()
    pr, resolved, mon = run_loop(_probe(endpoint, model, plan, engine_log))
    by_id = {r.request_id: r for r in pr.recs}
    for row in pr.rows:
        r = by_id[row.request_id]
        row.client_lag_s = mon.worst(r.send_s, r.last_token_s if math.isfinite(r.last_token_s) else r.send_s)
    req, chunks = _frame(pr.recs)
    _, all_chunks = _frame(pr.all_recs)
    windows = _mixed_windows(pr, all_chunks)
    meta: dict[str, Any] = {
        "run_id": f"probe-{label}-{int(time.time())}", "source": "probe", "trace_digest": "", "scenario": {},
        "seed": 0, "engine": label, "engine_config": resolved, "hardware": "live", "model": model,
        "offered_load_rps": math.nan, "run_window": {"start_s": 0.0, "duration_s": float(req["last_token_s"].max()),
                                                     "end_s": float(req["last_token_s"].max())},
        "exclusion": {**default_exclusion(), "exclude_first_dags": 0}, "telemetry_summary": {},
        "versions": {}, "probes": [asdict(r) for r in pr.rows], "plan": asdict(plan), "mixed_windows": windows,
        "client": {"scheduling": client_scheduling()}, "client_lag": mon.summary()}
    rec = RunRecord(meta=meta, requests=req, chunks=chunks)
    write_run(rec, out)
    return rec
