"""The virtual clock: simulated seconds = speed-up × wall seconds since the server started."""

from __future__ import annotations

import time


class VirtualClock:
    def __init__(self, speedup: float = 1.0, wall0: float | None = None):
        if not speedup > 0:
            raise ValueError("speed-up must be > 0")
        self.speedup = float(speedup)
        self.wall0 = time.monotonic() if wall0 is None else wall0

    def now(self) -> float:
        """Virtual time now."""
        return (time.monotonic() - self.wall0) * self.speedup

    def wall_at(self, v: float) -> float:
        """The monotonic wall time at which the virtual clock reads ``v``."""
        return self.wall0 + v / self.speedup

    def wait_for(self, v: float) -> float:
        """Wall seconds until the virtual clock reads ``v`` (≤ 0: passed)."""
        return self.wall_at(v) - time.monotonic()
