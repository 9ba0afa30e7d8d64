"""Fluid queue models of latency near saturation.

Open model (the reference study): where engine s keeps pace, its throughput X_s estimates the arrival
rate; an engine serving at X_v < X_s accumulates backlog at X_s − X_v, so with shortfall
δ = 1 − X_v/X_s the request arriving halfway through a window of length T waits
w50 = δ/(1−δ) · T/2. Predicted median TTFT of v = median TTFT of s + w50. No free parameter.

Closed-loop variant (agent graphs throttle their own arrivals): only DAG roots arrive open-loop;
every dependant is issued when its predecessors complete. In sustained overload, dependants are
released at the rate their predecessors are served, so they enter the queue about as fast as they
leave it, and the backlog grows only by roots: dQ/dt = λ_roots − X_v·(roots/requests), i.e. the open
model's growth rate times the fraction of requests that are roots, ρ = roots per DAG / requests per
DAG (1/6 for planner → 4 workers → aggregator). With FCFS every request waits behind that backlog:
w50_closed = ρ · δ/(1−δ) · T/2. It explains why the open model over-predicts; the two bracket the
truth when the queue mixes open and released work unevenly.
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


def closed_loop_wait(delta: float, run_length_s: float, roots_fraction: float) -> float:
    return roots_fraction * fluid_wait(delta, run_length_s)


def predicted_ttft_closed(ttft_s_p50: float, x_v: float, x_s: float, run_length_s: float,
                          roots_fraction: float) -> float:
    return ttft_s_p50 + closed_loop_wait(shortfall(x_v, x_s), run_length_s, roots_fraction)


def predicted_gap(delta: float, run_length_s: float, ttft_s_p50: float) -> float:
    """Median TTFT ratio the open model predicts; grows linearly with run length beyond the knee."""
    return (ttft_s_p50 + fluid_wait(delta, run_length_s)) / ttft_s_p50
