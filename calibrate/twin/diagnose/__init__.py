"""The twin study's investigations, each reached as ``servetwin twin-study diagnose NAME [ARGS …]`` (``--help``
after NAME lists its arguments): where a twin misses, and whether the host or an instance changed speed."""

from __future__ import annotations

import importlib
from collections.abc import Callable

DIAGNOSES = {
    "bias": ("calibrate.twin.bias", "each check's mean error over several studies: the twin's bias alone"),
    "host-speed": ("calibrate.twin.host_speed", "whether an instance kept its speed, from its step log"),
    "speed-windows": ("calibrate.twin.diagnose.speed_windows", "whether it kept its speed inside a run"),
    "scale-drift": ("calibrate.twin.diagnose.scale_drift", "how far an instance's scales drift between runs"),
    "repeatability": ("calibrate.twin.diagnose.repeatability", "how closely an instance repeats one trace"),
    "step-gaps": ("calibrate.twin.diagnose.step_gaps", "token gaps under load against the profile's decode step"),
    "step-timeline": ("calibrate.twin.diagnose.step_timeline", "a run's requests forward by forward, live and twin"),
    "ttft-residuals": ("calibrate.twin.diagnose.ttft_residuals", "TTFT live minus twin by requests in flight"),
    "vllm-admission": ("calibrate.twin.diagnose.vllm_admission", "a vLLM request's TTFT split by its step log"),
}


def entry(name: str) -> Callable[[list[str] | None], int]:
    """The investigation's ``main(argv)``."""
    fn: Callable[[list[str] | None], int] = importlib.import_module(DIAGNOSES[name][0]).main
    return fn
