"""Engine presets are data (simulator/profiles/engines/*.yaml): every knob of every preset has its default and
the engine file it is read from; the files describe exactly the configuration models' knobs."""

from __future__ import annotations

import pytest

from simulator.presets import FAMILIES, PRESET_NAMES, PRESETS, preset_data, resolve
from simulator.profiles import load_hardware, load_model


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_knob_of_a_preset_has_a_default_and_its_source(name):
    data = preset_data(name)
    cls = FAMILIES[data["family"]]
    assert set(data["knobs"]) == set(cls.model_fields) - {"family"}
    for knob, entry in data["knobs"].items():
        assert set(entry) == {"value", "source"} and len(entry["source"]) > 10, (name, knob)
    cls.model_validate({k: v["value"] for k, v in data["knobs"].items()})     # every value is accepted


def test_the_presets_are_their_data_files():
    assert list(PRESETS) == list(PRESET_NAMES)
    current = preset_data("sglang-current")["knobs"]
    assert current["version"]["value"] == "0.5.23" and current["schedule_policy"]["value"] == "fcfs"
    cfg = resolve("sglang-current", load_hardware("h100"), load_model("llama-3.1-8b"), 16384)
    assert cfg.schedule_policy == "fcfs" and cfg.version == "0.5.23"
    assert resolve("sglang-0.4.1", load_hardware("h100"), load_model("llama-3.1-8b"), 16384).schedule_policy == "lpm"


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_a_preset_file_reads_the_same_through_libyaml(name):
    """The presets are read with libyaml's loader (fast at every start); PyYAML's own reads them the same."""
    import yaml

    from simulator.presets import ENGINES_DIR
    text = (ENGINES_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) == yaml.safe_load(text)  # noqa: S506
