"""One engine replica as a SimPy process: schedule → batch → duration from the cost model → advance
time → emit tokens, finish, free.

A request reaches the scheduler ``CostModel.request_latency`` after it arrives (the front end's
per-request latency, 0 unless fitted), and its tokens and completion reach the client
``CostModel.delivery_latency`` after the engine produced them (the output path, 0 unless measured).
Where the front end is one event loop that also streams the tokens (``CostModel.front_end_loop``:
``simulator.front_end``), a request is taken in after the requests ahead of it and the output work the
loop does meanwhile, and each step's tokens reach the client one stream after another.
Ties: SimPy orders events at the same simulated time by the order in which they were scheduled; a
step's completion and an arrival at the same instant are therefore handled in scheduling order, and
requests that become issuable during a step are seen by the next ``schedule()`` call. Client timeouts
are applied at step boundaries.

With a ``step_log`` list the replica appends one event per step in the schema of the engine's own step
log (live/sglang_cpu/steplog): ``{"ev": "run", "t0", "t1", "mode", "reqs"}``, mode EXTEND (prefill),
DECODE or MIXED, each request as [request index, new tokens, cached tokens] while it prefills or
[request index, sequence length] while it decodes, read before the step runs.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import simpy

from simulator.cost_model import CostModel
from simulator.front_end import FrontEnd, Intake
from simulator.request import Request
from simulator.schedulers.base import Scheduler, Step
from simulator.telemetry import Telemetry

MODES = {"prefill": "EXTEND", "decode": "DECODE", "mixed": "MIXED"}


def step_event(step: Step, t0: float) -> dict[str, Any]:
    """The step as the engine's step log writes a forward (``t1`` is set when it ends)."""
    reqs: list[list[int]] = []
    for r, n in step.items:
        if r.in_prefill:
            reqs.append([r.idx, n, r.num_computed])
        else:
            reqs.append([r.idx, r.context_len])
    return {"ev": "run", "t0": t0, "t1": t0, "mode": MODES.get(step.kind, step.kind.upper()), "reqs": reqs}


class _Run:
    """A decode run taken but not yet applied: ``times[i]`` is when step i ends (``times[0]``: when it began)."""

    __slots__ = ("plan", "times", "durs", "kv")

    def __init__(self, plan: Any, times: list[float], durs: list[float], kv: list[float]):
        self.plan, self.times, self.durs, self.kv = plan, times, durs, kv


class _Final:
    """A run's last step, in which requests finish: applied up to its tokens; the scheduler completes it when it
    ends (``complete``), as a step-by-step run would."""

    __slots__ = ("step", "step_id")

    def __init__(self, step: Step, step_id: int):
        self.step, self.step_id = step, step_id


class Replica:
    def __init__(self, env: simpy.Environment, scheduler: Scheduler, cost: CostModel, telemetry: Telemetry,
                 on_finish: Callable[[Request], None], check_every: int = 0,
                 step_log: list[dict[str, Any]] | None = None, fast_forward: bool = True):
        self.env, self.sched, self.cost, self.tel = env, scheduler, cost, telemetry
        # decode runs in one event (simulator.fast_forward) where the family implements them and nothing
        # per step is observed (a step log, a front-end loop streaming each step)
        self.fast_forward = (fast_forward and step_log is None and cost.front_end_loop is None
                             and hasattr(scheduler, "decode_run"))
        self.runs = 0                             # decode runs fast-forwarded, steps they covered
        self.run_steps = 0
        self.step_log = step_log
        self.on_finish = on_finish
        self.check_every = check_every
        self.step_id = 0
        self._wake: simpy.Event | None = None
        self._aborts: list[Request] = []
        self._front: set[int] = set()             # ids of requests still in the front end (request latency)
        loop = cost.front_end_loop
        self.front = None if loop is None else FrontEnd(cost.request_latency, *loop)
        self._written: dict[int, float] = {}      # finished requests' last token: seconds after its step ended
        self.busy_s = 0.0
        self._run: _Run | None = None            # a decode run under way, applied when it ends or is cut
        self._resume_at = 0.0                    # a cut run: when the step in progress ends
        self._owed: float | None = None          # a cut run: that step's KV usage, sampled when it ends
        self._final: _Final | None = None         # a run's finishing step, completed when it ends
        self._proc = env.process(self._loop())

    def submit(self, req: Request) -> None:
        if self.front is not None:
            self._front.add(id(req))
            self.env.process(self._take_in(req, self.front.take_in(self.env.now)))
            return
        lat = self.cost.request_latency
        if lat <= 0:
            self._admit(req)
            return
        self._front.add(id(req))
        self.env.timeout(lat).callbacks.append(lambda _e: self._admit(req))

    def _take_in(self, req: Request, intake: Intake):  # type: ignore[no-untyped-def]
        """Wait while the front end's loop takes the request in (output work may push it later)."""
        while self.env.now < intake.done_at:
            yield self.env.timeout(intake.done_at - self.env.now)
        assert self.front is not None
        self.front.handed_over(intake)
        self._admit(req)

    def _stream(self, step: Step) -> None:
        """The front end's loop takes the step's outputs; its new tokens reach the client in batch order
        (``simulator.front_end``)."""
        assert self.front is not None
        now = self.env.now
        emitted = [r for r, _ in step.items if r.output_len and r.last_token_s == now and not r.error]
        if not emitted:
            return
        done = self.front.stream(now)
        for i, r in enumerate(emitted):
            late = self.front.written_at(done, i) - now
            r.delay_last_token(late)
            if r.is_finished:
                self._written[id(r)] = late

    def _admit(self, req: Request) -> None:
        self._front.discard(id(req))
        if req.error:                             # timed out while still in the front end
            return
        self.settle()
        self.sched.add(req, self.env.now)
        self._kick()

    def _deliver(self, req: Request) -> None:
        """A finished request's tokens and completion reach the client after the output path's latency."""
        lat = self.cost.delivery_latency
        wait = lat + self._written.pop(id(req), 0.0)
        if wait <= 0 or req.error:
            self.on_finish(req)
            return
        req.delay_tokens(lat)
        self.env.timeout(wait).callbacks.append(lambda _e: self.on_finish(req))

    def abort(self, req: Request) -> None:
        self.settle()
        self._aborts.append(req)
        self._kick()

    def settle(self) -> None:
        """Something outside the loop is about to act on or read this engine: a decode run under way is cut
        at the step in progress now (its earlier steps applied, that step's allocation and tokens too, its
        telemetry sample taken when it ends, as a step-by-step run would). An event at the very instant a
        step ends counts as arriving before that step ended."""
        run = self._run
        if run is None:
            return
        j = bisect_left(run.times, self.env.now, 1)
        self._apply_run(run, j)
        self._proc.interrupt()

    def _kick(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _apply_aborts(self) -> None:
        for r in self._aborts:
            if not r.is_finished and not r.error:
                if id(r) not in self._front:      # never reached the scheduler: nothing to abort there
                    self.sched.abort(r, self.env.now)
                r.error = "timeout"
                self.on_finish(r)
        self._aborts.clear()

    def _drain_rejected(self) -> None:
        for r in self.sched.rejected:
            self.on_finish(r)
        self.sched.rejected.clear()

    def _loop(self):  # type: ignore[no-untyped-def]
        env, sched = self.env, self.sched
        while True:
            self._apply_aborts()
            if self.fast_forward and sched.running:
                run = self._take_run()
                if run is not None:
                    yield from self._ride(run)
                    continue
            step = sched.schedule(env.now, self.step_id) if sched.has_work else None
            self._drain_rejected()
            if step is None:
                flushed = sched.flush(env.now)
                for r in flushed:
                    self._deliver(r)
                if flushed:
                    continue                      # a dependant may have arrived: schedule again
                if sched.has_work and not sched.running and sched.waiting:
                    r = sched.waiting.popleft()
                    sched.reject(r, "can never be admitted (exceeds the KV capacity)")
                    self._drain_rejected()
                    continue
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if step.shape.decodes:
                step.shape.decode_distinct = sched.distinct_kv_tokens()
            dur = self.cost.step_time(step.shape)
            event = step_event(step, env.now) if self.step_log is not None else None
            yield env.timeout(dur)
            if event is not None and self.step_log is not None:
                event["t1"] = env.now
                self.step_log.append(event)
            self.busy_s += dur
            done = sched.complete(step, env.now, self.step_id)
            if self.front is not None:
                self._stream(step)
            self.step_id += 1
            self._after_step(done)

    def _after_step(self, done: list[Request]) -> None:
        """A completed step's telemetry sample, the periodic integrity check, then its finished requests'
        deliveries."""
        self._sample(self.sched.kv_usage())
        if self.check_every and self.step_id % self.check_every == 0:
            self.sched.check_integrity()
            if self.front is not None:
                self.front.check_integrity()
        for r in done:
            self._deliver(r)

    def _sample(self, kv: float) -> None:
        c = self.sched.counters
        self.tel.sample(self.env.now, kv, len(self.sched.waiting), len(self.sched.running),
                        c.preemptions, c.prefix_hit_tokens, c.prefix_query_tokens)

    def _ride(self, run: _Run):  # type: ignore[no-untyped-def]
        """Wait out a decode run: to its end, or, cut by ``settle``, to the end of the step then in progress;
        then take the telemetry sample of the run's last applied step (after whatever arrived meanwhile), or
        complete it where requests finish in it."""
        self._run = run
        try:
            yield self.env.timeout(run.times[-1] - self.env.now)
            self._apply_run(run, len(run.durs))
        except simpy.Interrupt:
            if self.env.now < self._resume_at:
                yield self.env.timeout(self._resume_at - self.env.now)
        if self._final is not None:
            self._complete_final(self._final)
            return
        assert self._owed is not None
        self._sample(self._owed)
        self._owed = None

    def _complete_final(self, final: _Final) -> None:
        """The run's finishing step ends: the scheduler completes it (tokens, finishes, frees), then the
        telemetry sample and the deliveries, as the step-by-step loop does."""
        self._final = self._owed = None
        self._after_step(self.sched.complete(final.step, self.env.now, final.step_id))

    def _take_run(self) -> _Run | None:
        """The decode run the scheduler would take next, priced to its end (None: no run of two steps or more).
        Nothing is applied yet: the run is applied when it ends, or up to the step in progress when something
        acts on this engine first (``settle``)."""
        plan = self.sched.decode_run()  # type: ignore[attr-defined]
        if plan is None:
            return None
        n = len(plan.reqs)
        times, durs, kv = [self.env.now], [], []
        i, m = 1, 16
        while True:
            distinct, usage = plan.states(i, m)
            if not len(distinct):
                break
            ctx = [plan.ctx0 + n * (s - 1) for s in range(i, i + len(distinct))]
            t = times[-1]
            for dur, u in zip(self.cost.decode_step_times(n, ctx, distinct), usage, strict=True):
                t = t + dur
                times.append(t)
                durs.append(dur)
                kv.append(u)
            if len(distinct) < m:
                break
            i, m = i + m, 128
        if len(durs) < 2 or not plan.valid(len(durs)):
            return None
        return _Run(plan, times, durs, kv)

    def _apply_run(self, run: _Run, k: int) -> None:
        """Apply the run's first k steps; the k-th step's telemetry sample is owed until it ends."""
        self._run = None
        self._resume_at = run.times[k]
        self._owed = run.kv[k - 1]
        last = self.sched.apply_decode_run(run.plan, k, run.times, self.step_id)  # type: ignore[attr-defined]
        if last is not None:                     # its k-th step finishes requests: completed when it ends
            self._final = _Final(last, self.step_id + k - 1)
        c = self.sched.counters
        for dur in run.durs[:k]:
            self.busy_s += dur
        self.tel.sample_many(run.times[1:k], run.kv[:k - 1], len(self.sched.waiting), len(self.sched.running),
                             c.preemptions, c.prefix_hit_tokens, c.prefix_query_tokens)
        first = self.step_id
        self.step_id += k
        self.runs += 1
        self.run_steps += k
        if self.check_every and self.step_id // self.check_every > first // self.check_every:
            self.sched.check_integrity()
