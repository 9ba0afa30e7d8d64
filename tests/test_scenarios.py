"""Scenario specs, the trace compiler and the trace format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from scenarios import SpecError, compile_trace, read_trace, scenario_from_dict, validate_trace
from scenarios.trace import prefix_digest
from tests.conftest import small_scenario
from tests.helpers import mixed_trace


def test_prompt_is_its_segments_in_order():
    t = mixed_trace(3)
    for i in range(t.n_requests):
        rows = t.segment_rows(i)
        assert rows == t.segments(i).tolist() and all(type(x) is int for row in rows for x in row)
        want = [(t.arrays["prefix"] if src == 0 else t.arrays["pool"])[a:a + n] for src, a, n in rows]
        got = t.prompt(i)
        assert got.dtype == np.int32 and np.array_equal(got, np.concatenate(want))
        assert not np.shares_memory(got, t.arrays["pool"]) and not np.shares_memory(got, t.arrays["prefix"])

def test_sigma_exact_and_layout():
    sc = small_scenario(prompts={"length": 4096, "sharing": 0.9})
    t = compile_trace(sc)
    assert sc.prompts.F == 3686 and sc.prompts.D == 410
    assert abs(t.manifest["achieved_sharing"] - 3686 / 4096) < 1e-12
    lens = t.prompt_lengths()
    assert (lens == 4096).all()
    p0, p1 = t.prompt(0), t.prompt(1)
    assert (p0[:3686] == p1[:3686]).all() and (p0[3686:] != p1[3686:]).any()
    assert (t.prompt(5)[:3686] == t.arrays["prefix"]).all()


def test_role_ratio_and_dag_shape(small_trace):
    roles = small_trace.arrays["role"]
    n_dags = small_trace.n_dags
    assert (roles == 0).sum() == n_dags and (roles == 1).sum() == 4 * n_dags and (roles == 2).sum() == n_dags
    # aggregator depends on the four workers, workers on the planner
    assert list(small_trace.predecessors(5)) == [1, 2, 3, 4]
    assert all(list(small_trace.predecessors(i)) == [0] for i in range(1, 5))
    assert small_trace.arrays["delay_s"][1:5].min() > 0 and small_trace.arrays["delay_s"][0] == 0


def test_output_caps_per_role(small_trace):
    mt, role = small_trace.arrays["max_tokens"], small_trace.arrays["role"]
    assert set(mt[role == 0]) == {128} and set(mt[role == 1]) == {128} and set(mt[role == 2]) == {256}


def test_gamma_gaps_follow_the_gamma_law():
    sc = scenario_from_dict({"duration_s": 200000, "arrivals": {"rate": 0.5, "cv": 1.5},
                             "prompts": {"prefix_tokens": 4, "suffix_tokens": 4}})
    t = compile_trace(sc)
    arr = t.arrays["arrival_s"][t.roots()]
    gaps = np.diff(np.concatenate([[0.0], arr]))
    k, theta = 1 / 1.5**2, 1.5**2 / 0.5
    assert stats.kstest(gaps, "gamma", args=(k, 0, theta)).pvalue > 0.001
    assert abs(gaps.mean() - 2.0) / 2.0 < 0.03
    assert abs(gaps.std() / gaps.mean() - 1.5) < 0.05


def test_poisson_constant_and_replay():
    c = compile_trace(scenario_from_dict({"duration_s": 10, "arrivals": {"kind": "constant", "rate": 1}}))
    assert np.allclose(np.diff(c.arrays["arrival_s"][c.roots()]), 1.0)
    r = compile_trace(scenario_from_dict({"duration_s": 10, "arrivals": {"kind": "replay", "times": [0, 2.5, 7]}}))
    assert list(r.arrays["arrival_s"][r.roots()]) == [0, 2.5, 7]


def test_chain_prompts_accumulate_history():
    sc = scenario_from_dict({"duration_s": 60, "arrivals": {"rate": 0.1},
                             "topology": {"kind": "chain", "turns": 3},
                             "prompts": {"prefix_tokens": 100, "suffix_tokens": 20}})
    t = compile_trace(sc)
    p0, p1, p2 = t.prompt(0), t.prompt(1), t.prompt(2)
    assert len(p0) == 120 and len(p1) == 120 + 128 + 20 and len(p2) == len(p1) + 128 + 20
    assert (p1[:120] == p0).all() and (p2[:len(p1)] == p1).all()
    validate_trace(t)


def test_mix_and_dag_context():
    t = mixed_trace(2)
    validate_trace(t)
    dag = t.arrays["dag"]
    same = np.flatnonzero(dag == dag[0])
    a, b = t.prompt(int(same[0])), t.prompt(int(same[1]))
    assert (a[64:96] == b[64:96]).all()
    assert len(set(np.bincount(dag))) == 2   # two DAG sizes



def test_the_successor_arrays_list_each_requests_dependants_in_order():
    t = compile_trace(scenario_from_dict({
        "duration_s": 300, "arrivals": {"rate": 0.3},
        "topology": {"kind": "mix", "items": [{"weight": 1, "topology": {"kind": "fanout", "workers": 3}},
                                              {"weight": 1, "topology": {"kind": "chain", "turns": 3}}]},
        "prompts": {"prefix_tokens": 64, "suffix_tokens": 16}}))
    off, idx = t.successor_arrays()
    lists = t.successors()
    assert off[-1] == sum(len(s) for s in lists) == t.arrays["pred_index"].size > 0
    assert [idx[off[i]:off[i + 1]].tolist() for i in range(t.n_requests)] == lists

def test_determinism_across_processes(tmp_path: Path):
    spec = Path(__file__).parent.parent / "scenarios" / "examples" / "agent-mix.yaml"
    outs = []
    for k in range(2):
        out = tmp_path / f"t{k}"
        subprocess.run([sys.executable, "-m", "servetwin.cli", "trace", "compile", "--scenario", str(spec),
                        "--out", str(out)], check=True, capture_output=True,
                       env={"PYTHONHASHSEED": str(k + 11), "PATH": "/usr/bin:/bin"})
        outs.append(out)
    files = sorted(p.name for p in outs[0].iterdir())
    assert files == sorted(p.name for p in outs[1].iterdir())
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f


def test_different_seed_different_trace():
    a = compile_trace(small_scenario(seed=1))
    b = compile_trace(small_scenario(seed=2))
    assert prefix_digest(a.arrays["prefix"]) != prefix_digest(b.arrays["prefix"])


@pytest.mark.parametrize("data, field", [
    ({"prompts": {"length": 100, "sharing": 1.0}}, "prompts.sharing"),
    ({"arrivals": {"rate": -1}}, "arrivals.rate"),
    ({"prompts": {"length": 100, "sharing": 0.5, "prefix_tokens": 50}}, "prompts"),
    ({"bogus": 1}, "bogus"),
    ({"topology": {"kind": "fanout", "workers": 0}}, "topology.fanout.workers"),
])
def test_bad_specs_name_the_field(data, field):
    with pytest.raises(SpecError) as e:
        scenario_from_dict(data, "s.yaml")
    assert field in str(e.value) and "\n" not in str(e.value)


def test_round_trip_and_digest(tmp_path: Path, small_trace):
    from scenarios.trace import write_trace
    write_trace(small_trace, tmp_path / "t")
    t2 = read_trace(tmp_path / "t")
    assert t2.digest == small_trace.digest
    assert all((t2.arrays[k] == small_trace.arrays[k]).all() for k in t2.arrays)


def test_a_scenario_in_which_no_dag_arrives_is_refused_with_what_to_change():
    """Seed 197 at 0.21875 DAG/s (Gamma, CV 1.5) draws a first gap longer than 40 s: no trace, one error."""
    sc = small_scenario(seed=197, duration_s=40, arrivals={"rate": 0.21875, "cv": 1.5},
                        prompts={"length": 1200, "sharing": 0.0})
    with pytest.raises(SpecError, match=r"scenario 'small': no DAG arrives within duration_s=40.0 at rate 0.21875"):
        compile_trace(sc)
    longer = small_scenario(seed=197, duration_s=400, arrivals={"rate": 0.21875, "cv": 1.5})
    assert compile_trace(longer).arrays["max_tokens"].size > 0
