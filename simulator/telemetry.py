"""Telemetry as the engine reports it, sampled at step boundaries.

Peaks and time-weighted means are exact (every step counts); the stored series is thinned to one
sample per ``interval_s`` of simulated time, like a Prometheus scrape.

The run window: a run's arrivals span ``window_s`` (the trace's duration T), and the simulation goes on until
every request issued has finished (the drain). The study pulled the engine's series for the run window
(docs/cost-model.md, "The run window"), so the peaks and the preemption counter are also kept as they stood at
the last step that ended within it (``*_window`` in the summary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analysis.records import TELEMETRY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

_TYPES = (np.float64, np.float64, np.int64, np.int64, np.int64, np.int64, np.int64)   # TELEMETRY_COLUMNS'


class Telemetry:
    def __init__(self, interval_s: float = 1.0, window_s: float | None = None):
        self.interval_s = interval_s
        self.window_s = window_s
        self.window = (0.0, 0, 0)       # within the window: KV peak, waiting peak, preemptions at its last step
        self.rows: list[tuple[float, float, int, int, int, int, int]] = []
        self._next = 0.0
        self.peak_kv = 0.0
        self._area = 0.0
        self._last_t = 0.0
        self._last_kv = 0.0
        self.peak_waiting = 0
        self.peak_running = 0
        self.steps = 0

    def sample(self, t: float, kv: float, waiting: int, running: int, preemptions: int,
               hits: int, queries: int) -> None:
        self.steps += 1
        self._area += self._last_kv * (t - self._last_t)
        self._last_t, self._last_kv = t, kv
        self.peak_kv = max(self.peak_kv, kv)
        self.peak_waiting = max(self.peak_waiting, waiting)
        self.peak_running = max(self.peak_running, running)
        if self.window_s is not None and t <= self.window_s:
            self.window = (self.peak_kv, self.peak_waiting, preemptions)
        if t >= self._next:
            self.rows.append((t, kv, waiting, running, preemptions, hits, queries))
            self._next = t + self.interval_s

    def sample_many(self, times: list[float], kvs: list[float], waiting: int, running: int, preemptions: int,
                    hits: int, queries: int) -> None:
        """``sample`` at each of several step ends with the same queue depths and counters (a decode run): the
        same operations in the same order, the per-step bookkeeping kept in locals."""
        if not times:
            return
        self.steps += len(times)
        self.peak_waiting = max(self.peak_waiting, waiting)
        self.peak_running = max(self.peak_running, running)
        area, last_t, last_kv, peak = self._area, self._last_t, self._last_kv, self.peak_kv
        nxt, interval, rows = self._next, self.interval_s, self.rows
        end = self.window_s if self.window_s is not None else -1.0
        win = None
        for t, kv in zip(times, kvs, strict=True):
            area += last_kv * (t - last_t)
            last_t, last_kv = t, kv
            peak = max(peak, kv)
            if t <= end:
                win = peak
            if t >= nxt:
                rows.append((t, kv, waiting, running, preemptions, hits, queries))
                nxt = t + interval
        self._area, self._last_t, self._last_kv, self.peak_kv, self._next = area, last_t, last_kv, peak, nxt
        if win is not None:
            self.window = (win, self.peak_waiting, preemptions)

    def columns(self) -> dict[str, np.ndarray]:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(TELEMETRY_COLUMNS)
        return {name: np.array(col, dtype=t) for name, t, col in zip(TELEMETRY_COLUMNS, _TYPES, cols, strict=True)}

    def frame(self) -> pd.DataFrame:
        import pandas as pd
        return pd.DataFrame(self.columns())

    def summary(self, preemptions: int, hits: int, queries: int) -> dict[str, float]:
        return {"kv_usage_peak": self.peak_kv,
                "kv_usage_mean": self._area / self._last_t if self._last_t > 0 else 0.0,
                "waiting_peak": self.peak_waiting, "running_peak": self.peak_running,
                "preemptions": preemptions, "prefix_hit_tokens": hits, "prefix_query_tokens": queries,
                "prefix_hit_fraction": hits / queries if queries else 0.0, "steps": self.steps,
                **self.window_summary()}

    def window_summary(self) -> dict[str, float]:
        """KV peak, waiting peak and preemptions within the run window (nothing when no window was given)."""
        if self.window_s is None:
            return {}
        kv, waiting, preemptions = self.window
        return {"kv_usage_peak_window": kv, "waiting_peak_window": waiting, "preemptions_window": preemptions}
