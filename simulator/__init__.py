"""A simulated engine replica: request state, KV caches, schedulers, the step loop, the cost model,
presets and default resolution."""

from simulator import native

native.activate()                  # the compiled hot modules, where built from the current sources (before any import)

from simulator.presets import PRESETS, resolve  # noqa: E402
from simulator.simulate import simulate  # noqa: E402

__all__ = ["PRESETS", "resolve", "simulate"]
