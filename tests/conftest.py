from __future__ import annotations

import os

import pytest

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".numba_cache"))

from scenarios import compile_trace, scenario_from_dict  # noqa: E402


def small_scenario(**over):  # type: ignore[no-untyped-def]
    base = {"name": "small", "seed": 3, "duration_s": 120, "arrivals": {"kind": "gamma", "rate": 0.2},
            "prompts": {"length": 1024, "sharing": 0.9}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return scenario_from_dict(base)


@pytest.fixture
def small_trace():  # type: ignore[no-untyped-def]
    return compile_trace(small_scenario())
