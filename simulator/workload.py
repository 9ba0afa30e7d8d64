"""Drives a Trace into replicas: DAG roots at their arrival time, dependants when every predecessor has
completed plus the tool delay (the closed-loop behaviour of agent graphs). With the scenario's
``client.max_connections``, requests beyond that many in flight are held, as the live dispatcher's connection pool
holds them: sent (their send time and timeout start) but not yet at the engine; with ``client.max_concurrency`` they
are held before the send, as a semaphore holds them (``vllm bench serve --max-concurrency``): their send time and
timeout start when a slot frees."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from scenarios.trace import SRC_PREFIX, Trace
from simulator.request import Request, SharedHead
from simulator.request_log import RequestLog


class DagDriver:
    def __init__(self, env: simpy.Environment, trace: Trace, submit: Callable[[Request], None],
                 abort: Callable[[Request], None], timeout_s: float, record_tokens: bool = False):
        self.env, self.trace, self.submit, self.abort = env, trace, submit, abort
        self.timeout_s = timeout_s
        self.record_tokens = record_tokens
        a = trace.arrays
        self.pending = np.diff(a["pred_offsets"]).astype(np.int64)
        self.succ_offsets, self.succ_index = trace.successor_arrays()
        self.requests: dict[int, Request] = {}        # issued and not yet finished: a finished one is its log row
        self.log = RequestLog(trace, record_tokens)
        self.completed = 0
        self._seq = 0
        self.max_connections = trace.max_connections
        self.max_concurrency = trace.max_concurrency
        self.limit = self.max_connections or self.max_concurrency
        self.held: deque[Request] = deque()           # sent, waiting for a connection
        self._connected: set[int] = set()           # requests holding a connection (at the engine)
        F = trace.shared_prefix_len
        self.heads = [SharedHead(F) for _ in range(trace.prefix_groups)] if F else []
        self._issued = np.zeros(trace.n_requests, bool)
        self._unissued_from = 0                     # every request below it has been issued (read its prompt)
        env.process(self._arrivals())

    def _head(self, segs: list[list[int]]) -> SharedHead | None:
        """The shared prefix a prompt of these segments starts with, whole (None: it starts otherwise)."""
        if not self.heads or not segs:
            return None
        src, start, length = segs[0]
        F = self.heads[0].n_tokens
        return self.heads[start // F] if src == SRC_PREFIX and length == F and start % F == 0 else None

    @property
    def open(self) -> int:
        return len(self._connected)

    def _arrivals(self):  # type: ignore[no-untyped-def]
        a = self.trace.arrays
        roots = self.trace.roots()
        times = a["arrival_s"][roots] + a["delay_s"][roots]
        order = np.argsort(times, kind="stable")
        for i in roots[order].tolist():
            t = float(a["arrival_s"][i] + a["delay_s"][i])
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self._issue(i)

    def _issue(self, i: int) -> None:
        a = self.trace.arrays
        now = self.env.now
        segs = self.trace.segment_rows(i)
        r = Request(i, int(a["dag"][i]), self.trace.role_name(i), self.trace.prompt_of(segs),
                    int(a["max_tokens"][i]), now, now, self._seq, self.record_tokens, self._head(segs))
        self.requests[i] = r
        self._read(i)
        if self.limit is not None and self.open >= self.limit:
            self.held.append(r)
        else:
            self._connect(r)
        if self.timeout_s > 0 and self.max_concurrency is None:     # a pool's held request was sent: its clock runs
            self.env.timeout(self.timeout_s).callbacks.append(self._aborter(r))

    def _read(self, i: int) -> None:
        """Request i has read its prompt: the trace may let go of what no later request reads (only a pool mapped
        from its file has anything to let go of)."""
        if self.trace.pool_map is None:
            return
        self._issued[i] = True
        k, n = self._unissued_from, self.trace.n_requests
        while k < n and self._issued[k]:
            k += 1
        if k != self._unissued_from:
            self._unissued_from = k
            self.trace.done_reading(k)

    def _connect(self, r: Request) -> None:
        r.arrival_seq = self._seq                     # the engine's arrival order: when it reaches the engine
        self._seq += 1
        if self.max_concurrency is not None:          # past the semaphore: sent now, its timeout from now
            r.send_s = self.env.now
            if self.timeout_s > 0:
                self.env.timeout(self.timeout_s).callbacks.append(self._aborter(r))
        self._connected.add(r.idx)
        self.submit(r)

    def _aborter(self, r: Request) -> Callable[[simpy.Event], None]:
        return lambda _e: self._timed_out(r)

    def _timed_out(self, r: Request) -> None:
        if r.idx in self._connected:
            self.abort(r)
        elif not r.is_finished and not r.error:        # still waiting for a connection: the engine never saw it
            self.held.remove(r)
            r.error = "timeout"
            self.finished(r)

    def _issuer(self, i: int) -> Callable[[simpy.Event], None]:
        return lambda _e: self._issue(i)

    def finished(self, r: Request) -> None:
        """A request completed (or failed): release successors whose predecessors are all done. A failed one's
        tokens are dropped here (the engine has let go of it; a completed one's the engine drops itself, after its
        last use of them)."""
        if r.error:
            r.release_tokens()
        self.completed += 1
        if r.idx in self._connected:
            self._connected.discard(r.idx)
            while self.held and (self.limit is None or self.open < self.limit):
                self._connect(self.held.popleft())
        self.log.record(r)
        self.requests.pop(r.idx, None)
        a = self.trace.arrays
        o = self.succ_offsets
        for s in self.succ_index[o[r.idx]:o[r.idx + 1]].tolist():
            self.pending[s] -= 1
            if self.pending[s] == 0:
                delay = float(a["delay_s"][s])
                if delay > 0:
                    self.env.timeout(delay).callbacks.append(self._issuer(s))
                else:
                    self._issue(s)

