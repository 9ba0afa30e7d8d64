"""Statistics against hand-computed values and scipy; keeps-pace boundary; fluid model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from analysis.fluid import closed_loop_wait, fluid_wait, predicted_gap, predicted_ttft, shortfall
from analysis.metrics import KEEPS_PACE
from analysis.stats import geomean, paired_gap, removed_fraction, removed_fraction_interval, spread_of_medians


def test_geomean():
    assert geomean([1, 4, 16]) == pytest.approx(4.0)


def test_gap_interval_by_hand():
    a, b = np.array([2.0, 3.0, 2.5]), np.array([1.0, 1.0, 1.0])
    d = np.log(a / b)
    s = d.std(ddof=1)
    g = paired_gap(a, b)
    assert g.ratio == pytest.approx(math.exp(d.mean()))
    assert g.hi == pytest.approx(math.exp(d.mean() + 4.302653 * s / math.sqrt(3)), rel=1e-5)
    assert g.lo == pytest.approx(math.exp(d.mean() - 4.302653 * s / math.sqrt(3)), rel=1e-5)
    assert g.p_value == pytest.approx(sps.ttest_rel(np.log(a), np.log(b)).pvalue)


def test_phi_and_guard():
    assert removed_fraction(2.0, 1.0) == pytest.approx(1.0)
    assert removed_fraction(4.0, 2.0) == pytest.approx(0.5)
    assert removed_fraction(1.09, 1.0) is None
    assert removed_fraction(1.11, 1.0) is not None


def test_phi_interval_holds_the_point_estimate_and_is_exact_without_spread():
    d, m = np.log([2.0, 2.2, 1.9]), np.log([1.2, 1.3, 1.15])
    lo, hi = removed_fraction_interval(d, m)
    phi = removed_fraction(math.exp(d.mean()), math.exp(m.mean()))
    assert phi is not None and lo < phi < hi and hi - lo > 0.1
    same = removed_fraction_interval(np.log([2.0] * 3), np.log([1.2] * 3))
    assert same[0] == pytest.approx(same[1]) == pytest.approx(removed_fraction(2.0, 1.2))


def test_phi_interval_is_unbounded_where_the_defaults_gap_is_not_significant():
    """Seeds whose defaults gaps straddle 1 leave the ratio (and φ) unbounded: any φ fits them."""
    assert removed_fraction_interval(np.log([1.5, 0.9, 1.4]), np.log([1.2, 1.3, 1.15])) == (-math.inf, math.inf)
    assert all(math.isnan(x) for x in removed_fraction_interval(np.log([1.05] * 3), np.log([1.0] * 3)))  # guard
    assert all(math.isnan(x) for x in removed_fraction_interval(np.log([2.0]), np.log([1.2])))            # 1 seed
    with pytest.raises(ValueError, match="pair them by seed"):
        removed_fraction_interval(np.log([2.0, 2.1]), np.log([1.2]))


def test_phi_interval_covers_the_true_phi_95_percent_of_the_time():
    """Fieller's interval with the t quantile of 3 seeds: over many draws of correlated per-seed log gaps
    it holds the true φ (1 − 0.3 / 0.7) about 95 % of the time."""
    rng = np.random.default_rng(7)
    hits = n = 0
    for _ in range(3000):
        z = rng.multivariate_normal([0.7, 0.3], [[0.02, 0.01], [0.01, 0.02]], size=3)
        lo, hi = removed_fraction_interval(z[:, 0], z[:, 1])
        if not math.isnan(lo):
            n, hits = n + 1, hits + (lo <= 1 - 0.3 / 0.7 <= hi)
    assert n > 2800 and 0.93 < hits / n < 0.97


def test_spread():
    assert spread_of_medians([1.0, math.e, math.e**2]) == pytest.approx(1.0)


def test_keeps_pace_boundary():
    from analysis.metrics import run_metrics
    from tests.helpers import single_request_trace
    assert KEEPS_PACE == 0.97
    # synthetic record: 100 requests offered in T=100 s, 97 or 96 done by T
    import pandas as pd

    from analysis.records import RunRecord
    for done, expect in ((97, True), (96, False)):
        n = 101
        df = pd.DataFrame({"request_id": range(n), "dag_id": range(n), "role": "turn",
                           "planned_s": np.linspace(0, 99, n), "send_s": np.linspace(0, 99, n),
                           "first_token_s": 0.0, "last_token_s": [50.0] * (done + 1) + [150.0] * (n - done - 1),
                           "output_tokens": 2, "prompt_tokens": 10, "cached_tokens": 0.0, "ok": True, "error": ""})
        rec = RunRecord(meta={"run_id": "x", "engine": "e", "seed": 1, "offered_load_rps": 1.0,
                              "run_window": {"duration_s": 100.0}, "exclusion": {"exclude_first_dags": 1},
                              "telemetry_summary": {}}, requests=df)
        assert run_metrics(rec)["keeps_pace"] is expect
        # the study's rule is against the nominal load: a trace that issued fewer requests than nominal
        # (arrival luck, late dependants) can keep pace with what it issued and still fall behind the study's Λ
        rec.meta["offered_load_rps"] = 1.2
        m = run_metrics(rec)
        assert m["keeps_pace"] is False and m["keeps_pace_realised"] is expect
        assert m["pace"] == pytest.approx(done / 100 / 1.2) and m["pace_realised"] == pytest.approx(done / 100)
    del single_request_trace


def test_fluid_model_on_a_synthetic_backlog():
    # arrivals at rate 2/s for T = 100 s, served FCFS at 1.5/s: the request arriving at T/2 waits
    lam, mu, T = 2.0, 1.5, 100.0
    t = 50.0
    wait = (lam * t) / mu - t                # its position in the backlog divided by service rate
    assert fluid_wait(shortfall(mu, lam), T) == pytest.approx(wait)
    assert predicted_ttft(0.5, mu, lam, T) == pytest.approx(0.5 + wait)
    # with one level (no dependants) the closed-loop model reduces to the open one
    assert closed_loop_wait(mu, lam, [1], T) == pytest.approx(fluid_wait(shortfall(mu, lam), T), rel=1e-6)
    assert closed_loop_wait(2.5, lam, [1], T) == 0.0          # keeps pace: no backlog
    assert predicted_gap(shortfall(mu, lam), 2 * T, 0.5) > predicted_gap(shortfall(mu, lam), T, 0.5)
    assert fluid_wait(1.0, T) == math.inf


def test_skewness_matches_scipy():
    from analysis.metrics import skewness
    x = np.random.default_rng(3).lognormal(0.0, 0.8, 500)
    assert skewness(x) == pytest.approx(float(sps.skew(x)), rel=1e-12)
    assert math.isnan(skewness(np.ones(5)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                          st.sampled_from([0.0, 1.0, 1.0, 2.5])), max_size=40),
       st.one_of(st.sampled_from([0.0, 0.05, 0.5, 0.95, 0.99, 1.0]), st.floats(0.0, 1.0)))
@example([0.1, 0.7, 0.9], 0.25)        # halfway between 0.1 and 0.7: NumPy interpolates down from the upper one
@example([0.1, float("inf")], 1.0)
@example([-0.0], 0.0)                  # the last value itself: NumPy interpolates down from it, keeping -0.0
@example([-0.0, -0.0, 0.0, -1e-300], 0.5)   # equal zeros: where NumPy's partition leaves each decides the sign
def test_run_quantile_is_numpys_percentile_bit_for_bit(values, q):
    from analysis.metrics import _q
    v = np.array(values, dtype=np.float64)
    kept = v[~np.isnan(v)]
    with np.errstate(invalid="ignore"):
        want = float(np.percentile(kept, q * 100)) if kept.size else float("nan")
    got = _q(v, q)
    assert np.float64(got).tobytes() == np.float64(want).tobytes(), (values, q, got, want)
