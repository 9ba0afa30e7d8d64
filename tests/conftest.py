from __future__ import annotations

import pytest

from scenarios import compile_trace, scenario_from_dict


def small_scenario(**over):  # type: ignore[no-untyped-def]
    base = {"name": "small", "seed": 3, "duration_s": 120, "arrivals": {"kind": "gamma", "rate": 0.2},
            "prompts": {"length": 1024, "sharing": 0.9}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return scenario_from_dict(base)


GROUPED = {"tests/test_live_engine.py": "engine"}      # module -> its xdist_group: the real engines' tests


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Under `--dist loadgroup` a grouped test's node id carries its group: that is how pytest-xdist keeps the
    real engines' tests on one worker. Where pytest and pytest-xdist disagree on node ids the grouping is lost
    silently and two engines share the cores (their tests then fail on load alone), so the suite stops here."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = [i for i in ids if i.split("::")[0] in GROUPED and not i.endswith("@" + GROUPED[i.split("::")[0]])]
    if lost:
        import importlib.metadata as md
        raise pytest.UsageError(
            f"--dist loadgroup did not group {len(lost)} test(s), e.g. {lost[0]}: pytest {md.version('pytest')} "
            f"with pytest-xdist {md.version('pytest-xdist')} (pyproject.toml keeps pytest below 9.2 for this)")


@pytest.fixture
def small_trace():  # type: ignore[no-untyped-def]
    return compile_trace(small_scenario())
