"""Quality gates: a calibration that fails them is refused, not written.

A probe fit (``calibrate fit``, the twin study's fits) passes when

- R² over every probe shape is at least ``R2_MIN`` (0.98),
- its mean absolute percentage error is at most ``MAPE_MAX`` (10 %), and
- every probe kind's (prefill, cached, decode, mixed, batched) median error is within ``KIND_MAX`` (15 %), and
- the client kept time while probing: its event loop at most ``LAG_GATE_S`` (10 ms) late at p99 (probe
  records before the lag monitor carry no measurement and skip this gate);

a decode scale (``calibrate decode-scale``) passes when its base profile did and its streaming counts'
ratios sit within ``KIND_MAX`` of the scale (weighted median): one number then describes the instance.

A failed gate is one line naming the worst probe kind, its error and the likely cause — the client's own lag
from the probe records (``client_lag``) where it was late, since a client kept off a CPU adds its queueing to
every short probe (decode steps of a few milliseconds most of all). ``--accept-poor-fit`` writes the profile
anyway with ``fit.poor_fit`` set to that line; ``simulate`` and ``compare`` print it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from foundation.errors import ServetwinError

R2_MIN = 0.98
MAPE_MAX = 0.10
KIND_MAX = 0.15
LAG_SUSPECT_S = 0.005           # a client event loop this late (p99) during probes disturbs millisecond steps
LAG_GATE_S = 0.010              # … and this late, its probes are refused whatever the fit


class PoorFit(ServetwinError):
    """A calibration failed its quality gates (exit 1; nothing was written)."""


def kind_errors(per_probe: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Each probe kind's median signed relative error (predicted / measured − 1)."""
    by: dict[str, list[float]] = {}
    for p in per_probe:
        by.setdefault(str(p["kind"]), []).append(float(p["error"]))
    return {k: float(np.median(v)) for k, v in sorted(by.items())}


def failure(quality: dict[str, Any]) -> str | None:
    """The first gate a fit fails, in words (worst probe kind first), or None."""
    kinds = kind_errors(quality.get("per_probe_error", []))
    worst = max(kinds.items(), key=lambda kv: abs(kv[1]), default=None)
    if worst is not None and abs(worst[1]) > KIND_MAX:
        measured = np.median([p["measured_s"] for p in quality["per_probe_error"] if p["kind"] == worst[0]])
        return (f"worst probe kind '{worst[0]}': median error {worst[1]:+.0%} (gate ±{KIND_MAX:.0%}; measured "
                f"{measured * 1000:.2f} ms median); R² {quality['r2']:.3f}, MAPE {quality['mape']:.1%}")
    if quality["r2"] < R2_MIN:
        return f"R² {quality['r2']:.3f} below {R2_MIN} (MAPE {quality['mape']:.1%})"
    if quality["mape"] > MAPE_MAX:
        return f"MAPE {quality['mape']:.1%} above {MAPE_MAX:.0%} (R² {quality['r2']:.3f})"
    return None


def likely_cause(lags: Iterable[dict[str, Any] | None]) -> str:
    """What the probe records say of the client: its event loop's lag while probing."""
    known = [lag for lag in lags if lag]
    if not known:
        return "likely cause unknown (the probe records carry no client-lag measurement: probed before it existed)"
    p99 = max(float(lag.get("p99_s", 0.0)) for lag in known)
    worst = max(float(lag.get("max_s", 0.0)) for lag in known)
    sched = ", ".join(sorted({str(lag.get("scheduling", "?")) for lag in known}))
    if p99 > LAG_SUSPECT_S:
        return (f"likely cause: the client was kept off a CPU (its event loop {p99 * 1000:.0f} ms late at p99, "
                f"{worst * 1000:.0f} ms at worst, scheduling {sched}); probe again with real-time priority "
                "(root or CAP_SYS_NICE) or from another host")
    return (f"the client kept time (event-loop lag p99 {p99 * 1000:.1f} ms, scheduling {sched}): the engine or host "
            "changed speed during the probes, or the cost model misses this engine's steps; probe again on a quiet "
            "host")


def lag_failure(lags: Iterable[dict[str, Any] | None]) -> str | None:
    """The probe records' own gate: a client whose event loop was over ``LAG_GATE_S`` late at p99 while
    probing measured its own queueing along with the engine's steps, however well a fit then looks."""
    known = [lag for lag in lags if lag]
    p99 = max((float(lag.get("p99_s", 0.0)) for lag in known), default=0.0)
    if p99 > LAG_GATE_S:
        return (f"the client's event loop was {p99 * 1000:.0f} ms late at p99 while probing (gate "
                f"{LAG_GATE_S * 1000:.0f} ms)")
    return None


def guard(quality: dict[str, Any], lags: Iterable[dict[str, Any] | None], accept: bool, what: str,
          cause: str | None = None) -> None:
    """Refuse (raise PoorFit) a calibration that fails its gates, or mark it when ``accept``; ``cause``: what
    to suspect, where the probes were not taken through a client (default: the client's lag says)."""
    lags = list(lags)
    why = failure(quality) or lag_failure(lags)
    if why is None:
        return
    line = f"{what} fails its quality gates: {why}; {cause or likely_cause(lags)}"
    if not accept:
        raise PoorFit(line + "; nothing written (--accept-poor-fit writes it anyway, marked)")
    quality["poor_fit"] = line


def scale_failure(ratios: Iterable[float], weights: Iterable[float], scale: float) -> str | None:
    """A decode scale's gate: its streaming counts' ratios within KIND_MAX of it (weighted median)."""
    r = np.asarray(list(ratios), dtype=float) / scale - 1.0
    w = np.asarray(list(weights), dtype=float)
    if r.size == 0:
        return None
    order = np.argsort(np.abs(r))
    cum = np.cumsum(w[order])
    med = float(np.abs(r[order])[np.searchsorted(cum, cum[-1] / 2)])
    if med > KIND_MAX:
        return (f"its streaming counts' ratios sit {med:.0%} from the scale {scale:.3f} (weighted median; gate "
                f"{KIND_MAX:.0%})")
    return None
