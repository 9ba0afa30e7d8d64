"""Whole simulations: invariants after every step, conservation, queueing theory, determinism."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis.records import read_run, write_run
from foundation.errors import SpecError
from scenarios import compile_trace
from simulator import simulate
from tests.conftest import small_scenario
from tests.helpers import assert_dependants_sent_when_ready, constant_hardware, single_request_trace

ENGINES = [("vllm-0.6.3", {"enable_prefix_caching": True}),
           ("vllm-0.6.3", {"enable_prefix_caching": True, "enable_chunked_prefill": True,
                           "max_num_batched_tokens": 512}),
           ("vllm-v1", {}), ("sglang-0.4.1", {}), ("sglang-0.4.1", {"schedule_policy": "fcfs"}),
           ("sglang-current", {"mem_fraction_static": 0.88})]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), rate=st.floats(0.2, 2.0), sharing=st.sampled_from([0.0, 0.5, 0.9]),
       engine=st.sampled_from(range(len(ENGINES))), kv=st.sampled_from([None, 3000, 9000]))
def test_invariants_every_step(seed, rate, sharing, engine, kv):
    sc = small_scenario(seed=seed, duration_s=40, arrivals={"rate": rate}, prompts={"length": 1200, "sharing": sharing})
    name, over = ENGINES[engine]
    over = dict(over)
    if kv:
        if name.startswith("sglang"):
            over["max_total_tokens"] = kv
        else:
            over["num_gpu_blocks"] = kv // 16
    try:
        trace = compile_trace(sc)
    except SpecError:              # no DAG arrives in 40 s (a low rate's long first gap): refused, nothing to run
        assume(False)
    rec = simulate(trace, name, overrides=over, context=2048, check_every=1)   # small KV: vLLM refuses 16384
    r = rec.requests
    ok = r[r["ok"]]
    assert (ok["output_tokens"] == trace.arrays["max_tokens"][ok["request_id"]]).all()
    assert (ok["first_token_s"] >= ok["send_s"]).all() and (ok["last_token_s"] >= ok["first_token_s"]).all()
    assert (r["ok"] | (r["error"] != "")).all()


def test_every_request_served_and_dependencies_respected(small_trace):
    rec = simulate(small_trace, "sglang-0.4.1", check_every=1)
    r = rec.requests.set_index("request_id")
    assert r["ok"].all()
    assert_dependants_sent_when_ready(small_trace, r)


def test_md1_mean_wait():
    """Batch 1, constant service D, Poisson arrivals: mean wait = ρ D / (2 (1 − ρ))."""
    D, lam, n = 0.1, 6.0, 40000
    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(1 / lam, size=n))
    trace = single_request_trace(arrivals, 8, 1)
    rec = simulate(trace, "vllm-0.6.3", hardware=constant_hardware(D),
                   overrides={"max_num_seqs": 1, "max_num_batched_tokens": 16384}, timeout_s=0)
    r = rec.requests
    wait = (r["first_token_s"] - r["send_s"] - D).to_numpy()
    rho = lam * D
    expected = rho * D / (2 * (1 - rho))
    assert abs(wait.mean() - expected) / expected < 0.06


def test_same_bytes_in_two_processes(tmp_path: Path):
    code = ("import sys; from tests.conftest import small_scenario; from scenarios import compile_trace;"
            "from simulator import simulate; from analysis.records import write_run;"
            "write_run(simulate(compile_trace(small_scenario()), sys.argv[2]), sys.argv[1])")
    root = Path(__file__).parent.parent
    for eng in ("vllm-0.6.3", "sglang-0.4.1"):
        outs = []
        for k in range(2):
            out = tmp_path / f"{eng}-{k}"
            subprocess.run([sys.executable, "-c", code, str(out), eng], check=True, cwd=root,
                           env={"PYTHONHASHSEED": str(k), "PATH": "/usr/bin:/bin"}, capture_output=True)
            outs.append(out)
        a, b = read_run(outs[0]), read_run(outs[1])
        pd.testing.assert_frame_equal(a.requests, b.requests)
        assert a.meta["telemetry_summary"] == b.meta["telemetry_summary"]


@pytest.mark.parametrize("engine", ["vllm-0.6.3", "sglang-0.4.1", "vllm-v1"])
def test_golden_values(engine, small_trace):
    rec = simulate(small_trace, engine)
    r = rec.requests
    ttft = (r["first_token_s"] - r["send_s"]).to_numpy()
    got = [round(float(np.median(ttft)), 6), round(float(r["last_token_s"].max()), 6), int(r["ok"].sum())]
    assert got == pytest.approx(golden[engine], rel=1e-6), got


# Seeded golden values (small_scenario(), L4 profile): median TTFT, last token time, requests served.
# A change here is a change in behaviour: update only with a reason in the commit message.
golden: dict[str, list[float]] = {
    "vllm-0.6.3": [0.781961, 159.56124, 108],
    "sglang-0.4.1": [0.191178, 155.098191, 108],
    "vllm-v1": [0.110623, 150.322691, 108],
}


def test_record_round_trip(tmp_path: Path, small_trace):
    rec = simulate(small_trace, "vllm-v1", record_tokens=True)
    write_run(rec, tmp_path / "r")
    back = read_run(tmp_path / "r")
    pd.testing.assert_frame_equal(back.requests, rec.requests.astype(back.requests.dtypes.to_dict()))
    assert back.chunks is not None and len(back.chunks) == int(rec.requests["output_tokens"].sum())


@pytest.mark.parametrize("engine", ["vllm-0.6.3", "sglang-0.4.1"])
def test_every_request_lets_go_of_its_tokens_however_it_ended(engine, monkeypatch):
    """Memory follows the requests in flight: a request that timed out drops its prompt like a completed one."""
    from simulator import workload
    drivers = []
    init = workload.DagDriver.__init__

    def keep(self, *a, **k):  # type: ignore[no-untyped-def]
        init(self, *a, **k)
        self.requests = _Kept()
        drivers.append(self)
    monkeypatch.setattr(workload.DagDriver, "__init__", keep)
    t = compile_trace(small_scenario(duration_s=120, arrivals={"rate": 1.5}, prompts={"length": 2048}))
    rec = simulate(t, engine, timeout_s=20.0)
    assert (rec.requests["error"] == "timeout").any() and rec.requests["ok"].any()
    reqs = drivers[0].requests
    assert len(reqs.all) == int(rec.requests["send_s"].notna().sum())   # every issued request passed through
    assert not dict(reqs)                       # the driver holds none once it finished: each is its log row
    assert not [r for r in reqs.all if r.prompt.size]


def _driver(max_connections: int, service_s: float | None, timeout_s: float,  # type: ignore[no-untyped-def]
            limit: str = "max_connections"):
    """A DagDriver over a small trace whose client holds at most ``max_connections`` requests in flight (a pool, or
    with ``limit="max_concurrency"`` a semaphore), against a fake engine that finishes each request ``service_s``
    after it arrives (never, when None)."""
    import simpy

    from scenarios import compile_trace
    from simulator.workload import DagDriver
    from tests.conftest import small_scenario
    trace = compile_trace(small_scenario(client={limit: max_connections}))
    env = simpy.Environment()
    seen: list[tuple[float, int]] = []          # (time at the engine, requests at the engine then)
    box: dict = {}

    def submit(r):  # type: ignore[no-untyped-def]
        seen.append((env.now, box["d"].open))
        if service_s is not None:
            def done(_e):  # type: ignore[no-untyped-def]
                r.output_len = r.max_tokens
                box["d"].finished(r)
            env.timeout(service_s).callbacks.append(done)

    box["d"] = d = DagDriver(env, trace, submit, lambda r: None, timeout_s)
    d.requests = _Kept()           # the driver lets go of a finished request: keep every one here
    env.run(until=5000)
    return trace, d, seen


class _Kept(dict):
    """The driver's in-flight requests, with every request ever put there kept in order (as a list)."""

    def __init__(self):  # type: ignore[no-untyped-def]
        super().__init__()
        self.all: list = []

    def __setitem__(self, k, v):  # type: ignore[no-untyped-def]
        super().__setitem__(k, v)
        self.all.append(v)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.all)


def test_the_client_holds_requests_beyond_its_connections_and_their_wait_counts():
    """``client.max_connections``: never more requests at the engine than that; a held request's send time is
    when the trace sent it (its wait is in its TTFT, as the live dispatcher's pool wait is)."""
    trace, d, seen = _driver(2, 3.0, 1e9)
    assert trace.max_connections == 2 and max(n for _, n in seen) <= 2
    assert all(r is not None and r.is_finished for r in d.requests)
    waited = [t - r.send_s for (t, _), r in zip(seen, sorted(d.requests, key=lambda r: r.arrival_seq), strict=True)]
    assert max(waited) > 0 and min(waited) == 0


def test_a_request_held_past_its_timeout_fails_and_releases_its_graph():
    trace, d, seen = _driver(1, None, 50.0)       # the engine never answers: one connection stays taken
    assert len(seen) == 1
    failed = [r for r in d.requests if r is not None and r.error == "timeout"]
    assert failed and all(r.first_token_s != r.first_token_s for r in failed)      # never at the engine: no token
    assert any(r is not None and r.role == "worker" for r in d.requests)           # dependants were sent


def test_a_semaphore_client_sends_a_held_request_when_a_slot_frees():
    """``client.max_concurrency`` (vllm bench serve's): never more at the engine than that; a held request is sent
    when a slot frees, so its send time is its time at the engine (the wait is dispatch lag, not TTFT)."""
    trace, d, seen = _driver(2, 3.0, 1e9, "max_concurrency")
    assert trace.max_concurrency == 2 and trace.max_connections is None and max(n for _, n in seen) <= 2
    reqs = sorted(d.requests, key=lambda r: r.arrival_seq)
    assert all(r.is_finished for r in reqs)
    assert all(t == r.send_s for (t, _), r in zip(seen, reqs, strict=True))
    assert max(r.send_s - r.planned_s for r in reqs) > 0


def test_a_semaphore_clients_timeout_starts_when_it_sends():
    """The engine never answers and keeps its one request: held requests wait behind the semaphore without timing
    out (their clock has not started); a pool's held requests time out from the trace's send instead."""
    trace, d, seen = _driver(1, None, 50.0, "max_concurrency")
    assert len(seen) == 1
    issued = [r for r in d.requests if r is not None]
    assert len(issued) > 1 and not any(r.error for r in issued if r is not issued[0])
    _, pool, _ = _driver(1, None, 50.0)
    assert any(r is not None and r.error == "timeout" and r.first_token_s != r.first_token_s for r in pool.requests)


def test_a_client_takes_one_kind_of_limit():
    import pytest

    from foundation.errors import SpecError
    from tests.conftest import small_scenario
    with pytest.raises((SpecError, ValueError), match="not both"):
        small_scenario(client={"max_connections": 4, "max_concurrency": 4})


def test_a_pool_client_writes_only_its_limit_into_the_manifest():
    from scenarios import compile_trace
    from tests.conftest import small_scenario
    t = compile_trace(small_scenario(client={"max_connections": 3}))
    assert t.manifest["scenario"]["client"] == {"max_connections": 3}


def test_an_unset_client_leaves_the_trace_as_before():
    from scenarios import compile_trace
    from tests.conftest import small_scenario
    t = compile_trace(small_scenario())
    assert "client" not in t.manifest["scenario"] and t.max_connections is None
