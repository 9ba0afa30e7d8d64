"""Tool-call delays per tool class."""

from __future__ import annotations

import numpy as np

from scenarios.spec import ToolDelay


def draw_delays(spec: ToolDelay, rng: np.random.Generator, n: int) -> np.ndarray:
    """n delays in seconds, clipped to [0, max_s]."""
    if spec.kind == "constant":
        d = np.full(n, spec.median_s)
    elif spec.kind == "empirical":
        d = rng.choice(np.asarray(spec.samples, dtype=np.float64), size=n, replace=True)
    else:
        d = rng.lognormal(np.log(spec.median_s), spec.sigma_ln, size=n)
    return np.clip(d, 0.0, spec.max_s)
