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


def paired_gap(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> Gap:
    """Gap of metric a over metric b paired by seed: R_k = a_k / b_k (> 1: b is faster for latencies)."""
    d = np.log(np.asarray(a, dtype=float)) - np.log(np.asarray(b, dtype=float))
    n = d.size
    mean = float(d.mean())
    if n < 2:
        return Gap(math.exp(mean), float("nan"), float("nan"), float("nan"), n)
    s = float(d.std(ddof=1))
    half = float(sps.t.ppf(0.975, n - 1)) * s / math.sqrt(n)
    p = (0.0 if mean != 0 else 1.0) if s == 0 else float(sps.ttest_rel(np.log(a), np.log(b)).pvalue)
    return Gap(math.exp(mean), math.exp(mean - half), math.exp(mean + half), p, n)


def removed_fraction(r_def: float, r_mat: float) -> float | None:
    """φ = ln(R̄_def / R̄_mat) / ln R̄_def, only when |ln R̄_def| > ln 1.1 (else None)."""
    if abs(math.log(r_def)) <= PHI_GUARD:
        return None
    return math.log(r_def / r_mat) / math.log(r_def)


def spread_of_medians(medians: list[float] | np.ndarray) -> float:
    """Standard deviation of ln p50 across repetitions."""
    a = np.log(np.asarray(medians, dtype=float))
    return float(a.std(ddof=1)) if a.size > 1 else float("nan")
