"""The reference study's statistics: paired ratios per seed, geometric-mean gaps, 95% log-scale t
intervals, paired t-tests on log latencies, the removed fraction φ with its guard, dispersion."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

PHI_GUARD = math.log(1.1)


def geomean(x: ArrayLike, weights: ArrayLike | None = None) -> float:
    """exp(mean ln x), weighted by ``weights`` where given."""
    a = np.asarray(x, dtype=float)
    return float(np.exp(np.average(np.log(a), weights=None if weights is None else np.asarray(weights, dtype=float))))


@dataclass(frozen=True)
class Gap:
    """Paired gap R̄ = exp(mean ln R_k) with its 95% log-scale t interval and paired t-test p-value."""

    ratio: float
    lo: float
    hi: float
    p_value: float
    n: int

    @property
    def significant(self) -> bool:
        return self.p_value < 0.05


def _paired_p(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> float:
    """The paired t-test's p value; seeds whose ratios agree to rounding (replayed arrivals, say) make scipy warn
    of precision loss, which says nothing the interval does not."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(sps.ttest_rel(np.log(a), np.log(b)).pvalue)


def paired_gap(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> Gap:
    """Gap of metric a over metric b paired by seed: R_k = a_k / b_k (> 1: b is faster for latencies)."""
    d = np.log(np.asarray(a, dtype=float)) - np.log(np.asarray(b, dtype=float))
    n = d.size
    mean = float(d.mean())
    if n < 2:
        return Gap(math.exp(mean), float("nan"), float("nan"), float("nan"), n)
    s = float(d.std(ddof=1))
    half = float(sps.t.ppf(0.975, n - 1)) * s / math.sqrt(n)
    p = (0.0 if mean != 0 else 1.0) if s == 0 else _paired_p(a, b)
    return Gap(math.exp(mean), math.exp(mean - half), math.exp(mean + half), p, n)


def removed_fraction(r_def: float, r_mat: float) -> float | None:
    """φ = ln(R̄_def / R̄_mat) / ln R̄_def, only when |ln R̄_def| > ln 1.1 (else None)."""
    if abs(math.log(r_def)) <= PHI_GUARD:
        return None
    return math.log(r_def / r_mat) / math.log(r_def)


def removed_fraction_interval(log_def: ArrayLike, log_mat: ArrayLike) -> tuple[float, float]:
    """95 % interval of φ = 1 − mean(ln R_mat) / mean(ln R_def) from the per-seed log gaps of the two arms,
    paired by seed (the same seed serves the same trace in both): Fieller's interval for a ratio of means,
    with the t quantile of the seeds. (−inf, inf) where the defaults gap is not significantly different
    from 1 (the ratio is then unbounded: any φ is consistent with the seeds); NaN for fewer than 2 seeds
    or where φ is not computed (|ln R̄_def| ≤ ln 1.1)."""
    d, m = np.asarray(log_def, dtype=float), np.asarray(log_mat, dtype=float)
    if d.shape != m.shape:
        raise ValueError(f"φ interval: {d.size} defaults and {m.size} matched log gaps; pair them by seed")
    n = d.size
    if n < 2 or abs(float(d.mean())) <= PHI_GUARD:
        return math.nan, math.nan
    t2 = float(sps.t.ppf(0.975, n - 1)) ** 2
    cov = np.cov(m, d, ddof=1) / n                 # variances and covariance of the two means
    a, b = float(m.mean()), float(d.mean())
    qa = b * b - t2 * cov[1, 1]
    if qa <= 0:
        return -math.inf, math.inf
    qb = a * b - t2 * cov[0, 1]
    qc = a * a - t2 * cov[0, 0]
    root = math.sqrt(max(qb * qb - qa * qc, 0.0))  # ≥ 0: the point estimate a / b lies inside
    return float(1.0 - (qb + root) / qa), float(1.0 - (qb - root) / qa)


def spread_of_medians(medians: list[float] | np.ndarray) -> float:
    """Standard deviation of ln p50 across repetitions."""
    a = np.log(np.asarray(medians, dtype=float))
    return float(a.std(ddof=1)) if a.size > 1 else float("nan")
