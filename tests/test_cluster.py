"""Clusters and routers: every request served once, the routers' rules, determinism, a 1-replica cluster
equal to one engine, and prefix groups in traces."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from foundation.errors import SpecError, TraceError
from scenarios import compile_trace
from scenarios.validate import CHECKS
from simulator.cluster import ClusterSpec
from simulator.cluster_run import simulate_cluster
from simulator.request import Request
from simulator.routers.base import View
from simulator.routers.cache_aware import CacheAware, CacheAwareParams
from simulator.routers.registry import ROUTERS, make_router
from simulator.routers.scored import Scored, ScoredParams
from simulator.routers.tenant_tree import TenantTree
from simulator.simulate import simulate
from tests.conftest import small_scenario


@pytest.fixture(scope="module")
def grouped():  # type: ignore[no-untyped-def]
    return compile_trace(small_scenario(arrivals={"rate": 0.5}, prompts={"prefix_groups": 4}))


def _req(i: int, tokens: list[int] | np.ndarray, dag: int = 0) -> Request:
    return Request(i, dag, "worker", np.asarray(tokens, dtype=np.int32), 8, 0.0, 0.0, i)


# --- traces ----------------------------------------------------------------------------------------------
def test_one_prefix_group_leaves_the_trace_unchanged():
    a = compile_trace(small_scenario())
    b = compile_trace(small_scenario(prompts={"prefix_groups": 1, "prefix_group_skew": 0.0}))
    assert a.digest == b.digest
    assert "prefix_groups" not in a.manifest["scenario"]["prompts"]


def test_prefix_groups_are_distinct_and_whole_per_dag(grouped):  # type: ignore[no-untyped-def]
    t = grouped
    assert t.prefix_groups == 4 and t.arrays["prefix"].size == 4 * t.shared_prefix_len
    groups = {}
    for i in range(t.n_requests):
        groups.setdefault(int(t.arrays["dag"][i]), set()).add(t.prefix_group(i))
    assert all(len(g) == 1 for g in groups.values())
    assert len({next(iter(g)) for g in groups.values()}) == 4


def test_skew_favours_the_first_group():
    t = compile_trace(small_scenario(arrivals={"rate": 2.0}, prompts={"prefix_groups": 8, "prefix_group_skew": 2.0}))
    counts = np.bincount([t.prefix_group(i) for i in range(t.n_requests)], minlength=8)
    assert counts[0] > counts[1] > counts[7]


def test_validator_refuses_a_dag_across_groups(grouped):  # type: ignore[no-untyped-def]
    t = grouped
    segs = t.arrays["segments"].copy()
    first = t.arrays["seg_offsets"][1]           # request 1 belongs to DAG 0, as request 0 does
    assert t.arrays["dag"][1] == t.arrays["dag"][0]
    F = t.shared_prefix_len
    segs[first, 1] = (segs[first, 1] + F) % (4 * F)
    t.arrays["segments"] = segs
    with pytest.raises(TraceError, match="prefix groups"):
        CHECKS["sharing"](t)


# --- routers on their own ----------------------------------------------------------------------------------
def test_cache_aware_follows_the_prefix_when_balanced_and_the_load_when_not():
    r = CacheAware(CacheAwareParams(), 2, 0)
    shared = list(range(100, 200))
    view = View(2, [0, 0])
    assert r.route(_req(0, shared + [1, 2]), view, 0.0) == 0         # empty tree: miss → least loaded (first)
    view.in_flight[:] = [3, 0]                                      # balanced by the thresholds (64 / 1.5)
    assert r.route(_req(1, shared + [3, 4]), view, 0.0) == 0         # match rate ≈ 0.98 > 0.3 → the holder
    assert r.route(_req(2, [7] * 50), view, 0.0) == 1                # miss → least loaded
    view.in_flight[:] = [100, 10]                                   # 90 > 64 and 100 > 15: imbalanced
    assert r.route(_req(3, shared + [5]), view, 0.0) == 1
    assert r.decisions == {"imbalanced": 1, "hit": 1, "miss": 2}
    r.check_integrity()
    assert r.route(_req(4, shared + [6]), View(2, [0, 0]), 0.0) in (0, 1)   # both now hold it


def test_cache_aware_threshold_is_strict():
    r = CacheAware(CacheAwareParams(cache_threshold=0.5), 2, 0)
    view = View(2, [0, 0])
    assert r.route(_req(0, [1, 2, 3, 4]), view, 0.0) == 0
    view.in_flight[:] = [1, 0]
    assert r.route(_req(1, [1, 2, 9, 9]), view, 0.0) == 1            # rate 0.5 is not > 0.5 → least loaded
    assert r.route(_req(2, [1, 2, 3, 9]), view, 0.0) == 0            # 0.75 > 0.5 → holder


def test_tenant_tree_sizes_and_eviction():
    rng = np.random.default_rng(0)
    tree = TenantTree(3)
    base = rng.integers(0, 5, 40)
    for i in range(200):
        toks = np.concatenate([base[: rng.integers(0, 40)], rng.integers(0, 5, rng.integers(1, 30))]).astype(np.int32)
        tree.insert(toks, int(rng.integers(0, 3)))
        if i % 25 == 0:
            tree.check_integrity()
    for t in range(3):
        tree.evict(t, 50)
        tree.check_integrity()
        assert tree.size[t] <= 50
    matched, owner = tree.match(np.asarray(base[:5], np.int32))
    assert matched <= 5 and owner in (-1, 0, 1, 2)


def test_scored_prefers_the_replica_that_was_sent_the_prefix():
    r = Scored(ScoredParams(), 3, 0)
    r._scrape = None  # type: ignore[attr-defined]
    view = View(3, [0, 0, 0], lambda: ([0, 0, 0], [0.1, 0.1, 0.1]))
    shared = list(range(1000, 1064))
    first = r.route(_req(0, shared + list(range(5))), view, 0.0)
    assert all(r.route(_req(i, shared + [i] * 3), view, 0.0) == first for i in range(1, 6))
    busy = View(3, [0, 0, 0], lambda: ([9 if k == first else 0 for k in range(3)], [0.9 if k == first else 0.1
                                                                                 for k in range(3)]))
    assert r.route(_req(9, shared + [9]), busy, 0.0) != first       # 3·1 < 2 + 2·0.9 lost by the holder


def test_unknown_router_and_setting_are_refused():
    with pytest.raises(SpecError, match="known: round_robin"):
        make_router("nearest", {}, 2, 0)
    with pytest.raises(SpecError, match="accepted: latency_s"):
        make_router("cache_aware", {"threshold": 0.1}, 2, 0)


# --- whole clusters --------------------------------------------------------------------------------------
@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_every_request_is_served_once_and_runs_repeat(grouped, router):  # type: ignore[no-untyped-def]
    spec = ClusterSpec(("sglang-0.4.1",) * 3, router)
    a = simulate_cluster(grouped, spec, check_every=5)
    b = simulate_cluster(grouped, spec)
    assert a.requests.equals(b.requests) and a.telemetry.equals(b.telemetry)
    r = a.requests
    assert r["replica"].between(0, 2).all() and r["ok"].all()
    assert len(r) == grouped.n_requests and r["request_id"].is_unique
    per = a.meta["cluster"]["per_replica"]
    assert sum(p["prefix_query_tokens"] for p in per) == a.meta["telemetry_summary"]["prefix_query_tokens"]
    if router == "session":
        assert (r.groupby("dag_id")["replica"].nunique() == 1).all()


@pytest.mark.parametrize("engine", ["vllm-0.6.3", "sglang-0.4.1", "vllm-v1"])
def test_one_replica_cluster_equals_one_engine(engine):  # type: ignore[no-untyped-def]
    t = compile_trace(small_scenario())
    one = simulate(t, engine)
    cl = simulate_cluster(t, ClusterSpec((engine,), "round_robin"))
    assert one.requests.equals(cl.requests.drop(columns="replica"))
    assert one.telemetry.equals(cl.telemetry.drop(columns="replica"))
    assert one.meta["telemetry_summary"] == cl.meta["telemetry_summary"]


def test_router_latency_delays_every_request(grouped):  # type: ignore[no-untyped-def]
    base = simulate_cluster(grouped, ClusterSpec(("vllm-0.6.3",) * 2, "round_robin"))
    slow = simulate_cluster(grouped, ClusterSpec(("vllm-0.6.3",) * 2, "round_robin", (("latency_s", 0.05),)))
    a, b = (r.requests.set_index("request_id").loc[0] for r in (base, slow))   # the first: an idle engine
    assert b["first_token_s"] - b["send_s"] == pytest.approx(a["first_token_s"] - a["send_s"] + 0.05, abs=1e-9)


def test_cli_cluster_run_and_bad_router(tmp_path):  # type: ignore[no-untyped-def]
    trace = tmp_path / "t"
    cli = [sys.executable, "-m", "servetwin.cli"]
    subprocess.run(cli + ["trace", "compile", "--scenario", "scenarios/examples/rate-0.12.yaml", "--set",
                          "duration_s=60", "arrivals.rate=0.5", "prompts.prefix_groups=2", "--out", str(trace)],
                   check=True, capture_output=True)
    ok = subprocess.run(cli + ["simulate", "--trace", str(trace), "--engine", "sglang-0.4.1", "--replicas", "2",
                               "--router", "cache_aware", "--out", str(tmp_path / "run")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "2 replicas behind cache_aware" in ok.stdout
    bad = subprocess.run(cli + ["simulate", "--trace", str(trace), "--engine", "sglang-0.4.1", "--replicas", "2",
                                "--router-set", "cache_threshold=7", "--router", "cache_aware", "--out",
                                str(tmp_path / "bad")], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "cache_threshold" in bad.stderr
    assert not (tmp_path / "bad").exists()


# --- grids, sizing, figure ----------------------------------------------------------------------------------
def _scaling_grid(tmp_path):  # type: ignore[no-untyped-def]
    import yaml
    g = {"name": "tiny-scaling", "seeds": [1, 2],
         "base": {"duration_s": 240, "arrivals": {"rate": 0.15}, "prompts": {"length": 1024, "sharing": 0.9}},
         "scale_with_replicas": ["arrivals.rate"],
         "sweep": {"replicas": [1, 2], "router": ["round_robin", "cache_aware"], "prompts.prefix_groups": [2]},
         "arms": {"defaults": {"vllm": {"engine": "vllm-0.6.3", "set": {"enable_prefix_caching": True}},
                               "sglang": {"engine": "sglang-0.4.1"}}}}
    f = tmp_path / "g.yaml"
    f.write_text(yaml.safe_dump(g))
    return f


def test_grid_sweeps_replicas_and_routers_and_resumes(tmp_path):  # type: ignore[no-untyped-def]
    from analysis.records import read_meta
    from scenarios.grid import cells, load_grid
    from simulator.sweep import pending, run_cells
    cs = cells(load_grid(_scaling_grid(tmp_path)))
    assert len(cs) == 2 * 2 * 2 * 2
    two = next(c for c in cs if c.replicas == 2)
    assert two.scenario["arrivals"]["rate"] == pytest.approx(0.30) and two.is_cluster
    run_cells(cs, str(tmp_path / "runs"), jobs=1)
    assert pending(cs, tmp_path / "runs") == []
    meta = read_meta(tmp_path / "runs" / two.key)
    assert meta["cluster"]["replicas"] == 2 and meta["cluster"]["router"] == two.router
    from paper_figures.figures import headline_figures
    from servetwin.commands import _load
    made = headline_figures(_load([tmp_path / "runs"]), tmp_path / "figs")
    assert any(p.name == "gap_vs_replicas.png" for p in made)


def test_grid_refuses_a_bad_replica_count(tmp_path):  # type: ignore[no-untyped-def]
    import yaml

    from scenarios.grid import cells, load_grid
    f = _scaling_grid(tmp_path)
    g = yaml.safe_load(f.read_text())
    g["sweep"]["replicas"] = [0]
    f.write_text(yaml.safe_dump(g))
    with pytest.raises(SpecError, match="replicas 0"):
        cells(load_grid(f))


def test_fleet_sizing_finds_the_fewest_replicas():  # type: ignore[no-untyped-def]
    from analysis.metrics import KEEPS_PACE, run_metrics
    from simulator.sizing import size_fleet
    sc = small_scenario(duration_s=600, arrivals={"rate": 0.6}, prompts={"prefix_groups": 2})
    z = size_fleet(sc, 0.6, "sglang-0.4.1", "round_robin", {"ttft_p95": 1.0}, seeds=(1, 2), max_replicas=8,
                   measure=run_metrics, keeps_fraction=KEEPS_PACE)
    assert z.replicas is not None
    assert z.tried[z.replicas].meets
    assert all(not t.meets for n, t in z.tried.items() if n < z.replicas)
    if z.replicas > 1:
        assert z.replicas - 1 in z.tried                            # bisected down to its neighbour


def test_capacity_slo_refuses_an_unknown_metric(tmp_path):  # type: ignore[no-untyped-def]
    r = subprocess.run([sys.executable, "-m", "servetwin.cli", "capacity", "--scenario",
                        "scenarios/examples/rate-0.12.yaml", "--engine", "sglang-0.4.1", "--slo", "ttft_p99=2"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "ttft_p50, ttft_p95" in r.stderr and len(r.stderr.strip().splitlines()) == 1
