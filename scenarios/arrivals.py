"""L1 arrival processes: DAG arrival times in [0, duration)."""

from __future__ import annotations

import numpy as np

from scenarios.spec import Arrivals


def gamma_params(rate: float, cv: float) -> tuple[float, float]:
    """(shape k, scale θ) of gamma gaps with mean 1/rate and the given coefficient of variation."""
    return 1.0 / (cv * cv), cv * cv / rate


def _gaps(spec: Arrivals, rng: np.random.Generator, n: int) -> np.ndarray:
    if spec.kind == "gamma":
        k, theta = gamma_params(spec.rate, spec.cv)
        return rng.gamma(k, theta, size=n)
    if spec.kind == "poisson":
        return rng.exponential(1.0 / spec.rate, size=n)
    return np.full(n, 1.0 / spec.rate)


def arrival_times(spec: Arrivals, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a renewal process started at 0 (first arrival after one gap), below duration_s.

    Gaps are drawn in blocks so the number of draws never depends on anything but the seed.
    """
    if spec.kind == "replay":
        t = np.asarray(spec.times, dtype=np.float64)
        return t[t < duration_s]
    expected = int(duration_s * spec.rate) + 16
    chunks: list[np.ndarray] = []
    total = 0.0
    while total < duration_s:
        g = _gaps(spec, rng, expected)
        chunks.append(g)
        total += float(g.sum())
    times = np.cumsum(np.concatenate(chunks))
    return times[times < duration_s]
