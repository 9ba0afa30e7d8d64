"""The calibration library: probe a live engine and fit a profile to its steps, measure an instance's scales and
latencies from its runs, translate a live run's resolved configuration to a simulator preset, set live runs beside
their simulated twins, fit the hardware's efficiencies to a GPU's kernels. The CPU twin study built on it lives in
``calibrate.twin``, which this library never imports (``tests/test_layers.py``).

Names are imported on first use, so ``import calibrate`` costs nothing until one is read."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ProbePlan": "calibrate.probes", "probe": "calibrate.probes",
    "fit_probes": "calibrate.probe_fit", "fit_steps": "calibrate.fit", "write_profile": "calibrate.fit",
    "guard": "calibrate.gates", "R2_MIN": "calibrate.gates", "MAPE_MAX": "calibrate.gates",
    "decode_scale": "calibrate.decode_load", "scale_profile": "calibrate.decode_load",
    "lone_prefill_scale": "calibrate.lone_prefill", "measured_latencies": "calibrate.step_log",
    "fit_loop": "calibrate.vllm_front_end",
    "translate": "calibrate.translate", "Translation": "calibrate.translate", "Untranslatable": "calibrate.translate",
    "compare": "calibrate.compare", "twin": "calibrate.compare",
    "fit_gpu_probes": "calibrate.gpu_fit",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'calibrate' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
