"""Fluid queue models of latency near saturation.

Open model (the reference study): where engine s keeps pace, its throughput X_s estimates the arrival
rate; an engine serving at X_v < X_s accumulates backlog at X_s − X_v, so with shortfall
δ = 1 − X_v/X_s the request arriving halfway through a window of length T waits
w50 = δ/(1−δ) · T/2. Predicted median TTFT of v = median TTFT of s + w50. No free parameter.

Closed-loop variant (agent graphs throttle their own arrivals; the study's stated future work): only
DAG roots arrive open-loop at λ_d; a request at depth ℓ of its DAG (n_ℓ of them per DAG) is issued when
its predecessors complete. In sustained FCFS overload the backlog grows linearly, Q(t) = g·t, so a
request issued at t waits (s − 1)·t with s = 1 + g/X_v, and is served at s·t. Time is dilated by s at
each level: level ℓ is issued at s^ℓ·t and served at rate λ_d·n_ℓ / s^(ℓ+1). The server's throughput
fixes s:

    X_v = λ_d · Σ_ℓ n_ℓ / s^(ℓ+1)

and a request of level ℓ whose root arrived at t ~ U[0, T] waits (s − 1)·s^ℓ·t. The predicted median
wait is the median of that mixture (weights n_ℓ). No free parameter; tool delays are ignored. Against
simulation of a constant-service FCFS server (tests/test_fluid_sim.py) it lands within 10 % where the
open model over-predicts by 1.5–2× and ignoring the dilation under-predicts several-fold.
"""

from __future__ import annotations


def shortfall(x_v: float, x_s: float) -> float:
    return max(0.0, 1.0 - x_v / x_s)


def fluid_wait(delta: float, run_length_s: float) -> float:
    """w50 = δ/(1−δ)·T/2 (infinite when δ ≥ 1)."""
    if delta >= 1:
        return float("inf")
    return delta / (1 - delta) * run_length_s / 2


def predicted_ttft(ttft_s_p50: float, x_v: float, x_s: float, run_length_s: float) -> float:
    return ttft_s_p50 + fluid_wait(shortfall(x_v, x_s), run_length_s)


def dilation(x_v: float, dag_rate: float, level_counts: list[int]) -> float:
    """s ≥ 1 solving X_v = λ_d Σ n_ℓ / s^(ℓ+1) (1 when the server keeps pace)."""
    def served(s: float) -> float:
        return dag_rate * sum(n / s ** (lvl + 1) for lvl, n in enumerate(level_counts))
    if served(1.0) <= x_v:
        return 1.0
    lo, hi = 1.0, 2.0
    while served(hi) > x_v:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if served(mid) > x_v else (lo, mid)
    return (lo + hi) / 2


def closed_loop_wait(x_v: float, dag_rate: float, level_counts: list[int], run_length_s: float) -> float:
    """Median wait predicted by the closed-loop fluid model (see the module docstring)."""
    s = dilation(x_v, dag_rate, level_counts)
    if s == 1.0:
        return 0.0
    spans = [(s - 1) * s**lvl * run_length_s for lvl in range(len(level_counts))]
    total = sum(level_counts)

    def cdf(w: float) -> float:
        return sum(n * min(w / span, 1.0) for n, span in zip(level_counts, spans, strict=True)) / total
    lo, hi = 0.0, max(spans)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 0.5 else (lo, mid)
    return (lo + hi) / 2


def predicted_ttft_closed(ttft_s_p50: float, x_v: float, dag_rate: float, level_counts: list[int],
                          run_length_s: float) -> float:
    return ttft_s_p50 + closed_loop_wait(x_v, dag_rate, level_counts, run_length_s)


def predicted_gap(delta: float, run_length_s: float, ttft_s_p50: float) -> float:
    """Median TTFT ratio the open model predicts; grows linearly with run length beyond the knee."""
    return (ttft_s_p50 + fluid_wait(delta, run_length_s)) / ttft_s_p50
