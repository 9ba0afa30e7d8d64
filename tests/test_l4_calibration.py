"""The L4 default's calibration plumbing: coefficient names, overrides and the --at evaluation's input."""

import math
from pathlib import Path

import pytest
import yaml

from calibrate import l4_default as D
from calibrate import l4_targets as T
from simulator.profiles import load_hardware

ROOT = Path(__file__).resolve().parent.parent


def test_with_coefficients_sets_profile_and_family_fields_apart():
    hw = load_hardware("l4")
    out = T.with_coefficients(hw, {"eta_compute": 0.47, "sglang.step_eager_s": 0.005})
    assert out.eta_compute == 0.47 and out.overheads["sglang"].step_eager_s == 0.005
    assert out.overheads["vllm-v0"] == hw.overheads["vllm-v0"]
    assert hw.eta_compute != 0.47          # the shipped profile is untouched


def test_log_errors_vanish_at_the_targets_and_sign_a_miss():
    assert not D.log_errors(dict(T.TARGETS)).any()
    got = {**T.TARGETS, "C4_sglang_throughput": T.TARGETS["C4_sglang_throughput"] * 0.9}
    r = D.log_errors(got)
    assert r[list(T.TARGETS).index("C4_sglang_throughput")] == pytest.approx(math.log(0.9))


def test_coefficients_are_clipped_to_their_bounds():
    c = D.coefficients([math.log(10.0)] * len(D.NAMES))
    assert all(c[k] == D.BOUNDS[k][1] for k in D.NAMES)


@pytest.mark.parametrize("item", ["foo=1", "eta_compute", "eta_compute=x", "sglang.nope=1", "eta_compute=-1",
                                  "nofamily.kappa_kv=1", "eta_compute=nan"])
def test_at_refuses_bad_pairs_in_one_line(item, capsys):
    assert D.main(["--at", item]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and item in out and "KEY=VALUE" in out


def test_at_reads_profile_and_family_coefficients():
    hw = load_hardware("l4")
    assert D.parse_at(["eta_compute=0.47", "sglang.kappa_kv=0.2"], hw) == {"eta_compute": 0.47,
                                                                           "sglang.kappa_kv": 0.2}


def test_the_tool_median_is_the_studys_workload_not_a_profile_coefficient():
    coef = D.coefficients([math.log(D.START[k]) for k in D.NAMES])
    hw, tool = D.split(coef)
    assert D.WORKLOAD not in hw and tool == pytest.approx(D.START[D.WORKLOAD])
    assert D.parse_at(["tool_median_s=0.3"], load_hardware("l4")) == {"tool_median_s": 0.3}
    assert T.TOOL_MEDIAN_BOUNDS == D.BOUNDS[D.WORKLOAD] == (0.1, 0.8)     # the published MCP medians


def test_every_grid_of_the_studys_workload_carries_the_tool_delays_the_fit_inferred():
    want = T.study_tools(T.fitted_tool_median())["mcp"]
    assert want["p95_s"] == pytest.approx(T.TOOL_P95_RATIO * want["median_s"], abs=1e-4)
    study = 0
    for f in sorted((ROOT / "scenarios").glob("*/*.yaml")):      # grids and example scenarios
        doc = yaml.safe_load(f.read_text())
        base = doc.get("base", doc)          # a grid's base, or a scenario itself
        if base.get("topology", {}).get("tool") == "mcp" and base.get("prompts", {}).get("length") == 4096:
            study += 1
            assert base.get("tools", {}).get("mcp") == want, f.name
            # the study's client (inferred from C1) on the study's single-engine grids; a cluster grid asks about
            # the replicas, not about that client
            cluster = "replicas" in doc.get("sweep", {})
            assert base.get("client") == (None if cluster else T.STUDY_CLIENT), f.name
    assert study >= 11


def test_the_studys_conditions_are_simulated_with_the_studys_client():
    t = T.study_trace(1.0, 60.0, 0.9, 1, 0.15)
    assert t.max_concurrency == T.STUDY_CLIENT["max_concurrency"] and t.max_connections is None


def _runs(per_seed: dict[tuple[str, str], list[float]]) -> dict:
    """Runs whose every metric is one number per seed (enough for ``achieved``)."""
    keys = ("throughput", "ttft_p50", "ttft_p95", "e2e_p50", "tpot_p50")
    return {k: [dict.fromkeys(keys, v) for v in vs] for k, vs in per_seed.items()}


def test_the_seed_spread_takes_every_three_seeds_and_places_the_published_figure():
    from calibrate import l4_seeds as S
    n = 5
    flat = {k: [1.0] * n for k in [("C1", T.VLLM), ("C2", T.SGLANG), ("r28", T.VLLM), ("r40", T.VLLM),
                                   ("r40", T.SGLANG)]}
    runs = _runs({**flat, ("r28", T.SGLANG): [1.0, 2.0, 4.0, 8.0, 16.0]})
    assert len(S.triples(runs, n)) == 10
    got = S.spread(runs, n)["C4_sglang_throughput"]
    values = sorted(2.0 ** (sum(t) / 3) for t in __import__("itertools").combinations(range(n), 3))
    assert got["seeds_1_3"] == pytest.approx(2.0)                       # seeds 1-3: 1, 2, 4
    assert got["mean"] == pytest.approx(sum(values) / 10, abs=1e-4)
    assert got["published_percentile"] == 10 * sum(v < 1.66 for v in values)
    assert S.spread(runs, n)["C1_vllm_throughput"]["sd_pct"] == 0.0     # a target no seed moves has no spread
    with pytest.raises(ValueError):
        S.spread(runs, 2)


@pytest.mark.parametrize("argv", [["--seeds", "2"], ["--seeds", "1000"], ["--at", "eta_compute=x"]])
def test_the_seed_spread_refuses_bad_input_in_one_line(argv, capsys):
    from calibrate import l4_spread as S
    assert S.main(argv) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: ") and out.count("\n") == 1


def test_a_fit_on_the_expectation_weighs_each_target_by_its_spread_within_a_floor():
    from calibrate import l4_seeds as S
    n = 6
    flat = {k: [1.0] * n for k in [("C1", T.VLLM), ("C2", T.SGLANG), ("r28", T.VLLM), ("r40", T.VLLM),
                                   ("r40", T.SGLANG)]}
    runs = _runs({**flat, ("r28", T.SGLANG): [1.0, 1.1, 0.9, 1.2, 0.8, 1.0]})
    spread = S.log_spread(runs, n)
    assert spread["C1_vllm_throughput"] == 0.0 and spread["C4_sglang_throughput"] > 0.0
    assert spread["C5_capacity_gap"] == pytest.approx(spread["C4_sglang_throughput"])   # vLLM's side is flat
    w = S.weights(spread)
    names = list(T.TARGETS)
    assert w.mean() == pytest.approx(1.0)
    assert w[names.index("C4_sglang_throughput")] < w[names.index("C1_vllm_throughput")]
    # no spread at all weighs only as much as the floor lets it
    assert w[names.index("C1_vllm_throughput")] / w[names.index("C4_sglang_throughput")] == pytest.approx(
        (spread["C4_sglang_throughput"] ** 2 + S.FLOOR ** 2) / S.FLOOR ** 2)


@pytest.mark.parametrize("n", ["2", "500"])
def test_the_fit_refuses_a_bad_seed_count_in_one_line(n, capsys):
    assert D.main(["--seeds", n]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: --seeds") and out.count("\n") == 1


def test_each_target_is_read_against_the_seeds_draw_of_arrivals():
    from calibrate import l4_seeds as S
    counts = [0.9, 1.0, 1.1, 1.2, 0.95]
    flat = {k: [1.0] * 5 for k in [("C1", T.VLLM), ("C2", T.SGLANG), ("r28", T.VLLM), ("r40", T.VLLM),
                                   ("r40", T.SGLANG)]}
    runs = _runs({**flat, ("r28", T.SGLANG): [1.5 * c for c in counts]})      # keeps pace: X ∝ graphs that came
    for (cond, _), ms in runs.items():
        for m, c in zip(ms, counts if cond == "r28" else [1.0] * 5, strict=True):
            m["arrivals"] = c
    got = S.by_arrivals(runs, 5)
    c4 = got["C4_sglang_throughput"]
    assert c4["expected"] == pytest.approx(1.5) and c4["elasticity"] == pytest.approx(1.0)
    assert c4["count_needed"] == pytest.approx(1.66 / 1.5, abs=1e-4)
    sd = 1.5 / math.sqrt(0.28 * 600) / math.sqrt(3)
    assert c4["p_count"] == pytest.approx(0.5 * math.erfc(math.log(1.66 / 1.5) / sd / math.sqrt(2)), abs=1e-4)
    assert math.isnan(got["C1_vllm_throughput"]["count_needed"])               # no draw moves a flat target
    assert got["C5_capacity_gap"]["elasticity"] == pytest.approx(1.0)          # vLLM's side is flat
