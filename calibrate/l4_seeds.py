"""Each C1-C6 target over every three distinct seeds (the study's aggregate: a geometric mean of three runs), and
the weights a fit on the expectation gives the targets by that spread (``calibrate.l4_spread``, ``l4_default``)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from calibrate import l4_targets as T

Runs = T.Runs
FLOOR = 0.03        # the model's own error beside the seeds' spread (log scale) when targets are weighted


def triples(runs: Runs, n: int) -> dict[tuple[int, int, int], dict[str, float]]:
    """Every target's value for each set of three distinct seeds (indices into each condition's runs)."""
    out = {}
    for idx in itertools.combinations(range(n), 3):
        out[idx] = T.achieved({k: [ms[i] for i in idx] for k, ms in runs.items()})
    return out


def spread(runs: Runs, n: int) -> dict[str, dict[str, float]]:
    """Per target: published, seeds 1-3 (the first three runs), the mean, the standard deviation in per cent of
    the mean, 5th and 95th percentiles over every three distinct seeds, and the share of them below the
    published figure (its percentile)."""
    if n < 3:
        raise ValueError("a spread over three seeds needs at least three seeds")
    by = triples(runs, n)
    out = {}
    for k, pub in T.TARGETS.items():
        v = np.array([t[k] for t in by.values()])
        out[k] = {"published": pub, "seeds_1_3": round(by[(0, 1, 2)][k], 4), "mean": round(float(v.mean()), 4),
                  "sd_pct": round(float(100 * v.std() / v.mean()), 2),
                  "p5": round(float(np.percentile(v, 5)), 4), "p95": round(float(np.percentile(v, 95)), 4),
                  "published_percentile": round(float(100 * (v < pub).mean()), 1)}
    return out


def log_spread(runs: Runs, n: int) -> dict[str, float]:
    """Per target, the standard deviation of the log of its value over every three distinct seeds: how far a
    published figure (three runs) may stand from the expectation by the draw of its seeds alone."""
    by = triples(runs, n)
    return {k: float(np.std([math.log(t[k]) for t in by.values()])) for k in T.TARGETS}


def weights(spread: dict[str, float], floor: float = FLOOR) -> np.ndarray:
    """Each target's weight in a fit on the expectation, in ``TARGETS`` order: 1 / (spread² + floor²), scaled to a
    mean of 1 — a figure the seeds move little counts more, but no target more than the model's own error allows."""
    w = np.array([1.0 / (spread[k] ** 2 + floor ** 2) for k in T.TARGETS])
    return w / w.mean()


def per_seed(runs: Runs, n: int) -> dict[str, np.ndarray]:
    """Every target's value on each seed alone (a geometric mean of one run is the run)."""
    one = [T.achieved({k: [ms[i]] for k, ms in runs.items()}) for i in range(n)]
    return {k: np.array([o[k] for o in one]) for k in T.TARGETS}


def count_law(cond: str) -> float:
    """The standard deviation of the log of three seeds' mean graph count over its nominal λT: a renewal process
    of Gamma gaps with coefficient of variation cv counts λT graphs on average with variance cv²·λT."""
    rate, dur = T.CONDITIONS[cond][:2]
    return T.ARRIVALS_CV / math.sqrt(rate * dur) / math.sqrt(3)


def by_arrivals(runs: Runs, n: int) -> dict[str, dict[str, float]]:
    """Per target, how it moves with the seed's draw of arrivals, and what the published figure says of the study's.

    Over seeds 1..n, the log of each target on one seed is fitted (least squares) to the log of that seed's graph
    count over the nominal λT (``arrivals``): ``expected`` is the target at the nominal count (the draw of seeds
    1..n taken out), ``elasticity`` its slope; ``count_needed`` the count factor, three seeds' geometric mean, at
    which the fit reaches the published figure, and ``p_count`` the chance that three seeds bring at least that
    many, or as few where the figure needs fewer (the count's log normal with ``count_law``'s spread; NaN where the
    target does not move with arrivals)."""
    if n < 3:
        raise ValueError("a fit over seeds needs at least three seeds")
    vals = per_seed(runs, n)
    out = {}
    for k, pub in T.TARGETS.items():
        cond = T.CONDITION_OF[k]
        x = np.log([ms["arrivals"] for ms in runs[(cond, T.CONDITIONS[cond][3][0])][:n]])
        y = np.log(vals[k])
        b, a = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (0.0, float(y.mean()))
        row = {"published": pub, "expected": round(math.exp(a), 4), "elasticity": round(float(b), 3),
               "count_needed": math.nan, "p_count": math.nan}
        if abs(b) >= 0.1:
            need = (math.log(pub) - a) / b
            row["count_needed"] = round(math.exp(need), 4)
            row["p_count"] = round(0.5 * math.erfc(abs(need) / count_law(cond) / math.sqrt(2)), 4)
        out[k] = row
    return out
