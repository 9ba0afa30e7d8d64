"""A simulated engine replica: request state, KV caches, schedulers, the step loop, the cost model,
presets and default resolution."""

from simulator.presets import PRESETS, resolve
from simulator.simulate import simulate

__all__ = ["PRESETS", "resolve", "simulate"]
