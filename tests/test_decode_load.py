"""calibrate.decode_load: an instance whose decode steps run slower under load than its profile says is
measured as such from its token gaps (and one that runs as profiled is not), the scale applies to
pure-decode steps only, and the profile it writes carries it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.records import RunRecord, read_run, write_run
from calibrate.decode_load import decode_scale, write_scaled
from calibrate.twin.study import scenario
from scenarios import ServetwinError, compile_trace, scenario_from_dict
from servetwin.cli import main as cli_main
from simulator import simulate
from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import load_hardware, load_model

TINY = load_model("tiny-llama")
SG = {"schedule_policy": "lpm", "max_total_tokens": 65536, "attention_backend": "torch_native"}


def slowed(k: float, lone: float | None = None):  # type: ignore[no-untyped-def]
    hw = load_hardware("cpu-base")
    return dataclasses.replace(hw, overheads={f: dataclasses.replace(o, decode_scale=k, decode_scale_lone=lone)
                                              for f, o in hw.overheads.items()})


def sglang_run(hw, seed: int = 1):  # type: ignore[no-untyped-def]
    trace = compile_trace(scenario_from_dict(scenario(0.5, 0.9, 30.0, seed)))
    return simulate(trace, "sglang-current", hw, TINY, SG, context=8192, record_tokens=True)


def test_decode_scale_touches_pure_decode_steps_only():
    base, slow = CostModel(slowed(1.0), TINY, "sglang"), CostModel(slowed(1.3), TINY, "sglang")
    dec, mixed = BatchShape(), BatchShape()
    for _ in range(4):
        dec.add_decode(2048)
        mixed.add_decode(2048)
    mixed.add_prefill(200, 1800, True)
    assert slow.step_time(dec) == pytest.approx(1.3 * base.step_time(dec))
    assert slow.step_time(mixed) == base.step_time(mixed)


def test_a_lone_decode_scale_touches_pure_decode_steps_of_one_request_only():
    base, split = CostModel(slowed(1.0), TINY, "sglang"), CostModel(slowed(1.3, lone=1.1), TINY, "sglang")
    one, two, mixed = BatchShape(), BatchShape(), BatchShape()
    one.add_decode(2048)
    for _ in range(2):
        two.add_decode(2048)
    mixed.add_decode(2048)
    mixed.add_prefill(200, 1800, True)
    assert split.step_time(one) == pytest.approx(1.1 * base.step_time(one))
    assert split.step_time(two) == pytest.approx(1.3 * base.step_time(two))
    assert split.step_time(mixed) == base.step_time(mixed)


@pytest.mark.parametrize("k", [1.0, 1.3])
def test_measures_how_much_slower_an_instance_decodes_than_its_profile(k: float):
    """The "live" run is the same trace simulated with decode steps k times the profile's; the measure
    recovers k from token gaps alone (queues differ between the two runs, so not exactly)."""
    live, twin = sglang_run(slowed(k)), sglang_run(slowed(1.0))
    found = decode_scale(live, twin)
    assert found.scale == pytest.approx(k, rel=0.06)
    assert found.lone == pytest.approx(k, rel=0.06)
    assert found.gaps > 1000 and len(found.by_streams) >= 3


def test_a_lone_requests_decode_is_measured_apart_from_concurrent_ones():
    """An instance whose lone decodes run at 1.1× its profile and its concurrent ones at 1.4×: both are
    recovered, each from its own gaps, and a profile written from them carries both."""
    live, twin = sglang_run(slowed(1.4, lone=1.1)), sglang_run(slowed(1.0))
    found = decode_scale(live, twin)
    assert found.scale == pytest.approx(1.4, rel=0.06) and found.lone == pytest.approx(1.1, rel=0.06)
    lone_gaps = int(found.by_streams.loc[found.by_streams["streaming"] == 1, "live_gaps"].sum())
    assert found.lone_gaps == lone_gaps > 100 and found.gaps + lone_gaps == found.by_streams["live_gaps"].sum()


def _streams(gaps_ms: list[float], streams: int = 3) -> RunRecord:
    """``streams`` requests that start together and stream one token after every gap in ``gaps_ms``."""
    t = np.concatenate([[0.0], np.cumsum(gaps_ms) / 1000])
    chunks = pd.DataFrame({"request_id": np.repeat(np.arange(streams), len(t)), "t_s": np.tile(t, streams)})
    req = pd.DataFrame({"request_id": np.arange(streams), "first_token_s": 0.0, "last_token_s": t[-1]})
    return RunRecord(meta={}, requests=req, chunks=chunks)


def test_the_scale_prices_the_tail_of_live_gaps_that_an_e2e_sums():
    """Live gaps of 10 ms with every tenth at 50 ms against a twin's steady 10 ms: a request's decode
    time is 1.4× its twin's, so the default (mean) scale is 1.4; ``median`` says 1.0 (the typical gap)."""
    live, twin = _streams([50.0 if i % 10 == 9 else 10.0 for i in range(100)]), _streams([10.0] * 100)
    assert decode_scale(live, twin).scale == pytest.approx(1.4)
    assert decode_scale(live, twin, statistic="median").scale == pytest.approx(1.0)
    with pytest.raises(ServetwinError, match="statistic 'p99' unknown; accepted: mean, median"):
        decode_scale(live, twin, statistic="p99")


def test_a_run_without_concurrent_streams_is_refused_with_a_reason():
    run = sglang_run(slowed(1.0))
    with pytest.raises(ServetwinError, match="no streaming count with 100000"):
        decode_scale(run, run, min_gaps=100000)


def test_the_command_writes_a_profile_with_the_measured_scale(tmp_path: Path, capsys):  # type: ignore[no-untyped-def]
    live = sglang_run(slowed(1.25), seed=2)
    live.meta.update({"source": "live", "engine": "sglang-lpm", "request_timeout_s": 300.0,
                      "engine_config": {**SG, "version": "0.5.23", "chunked_prefill_size": 4096,
                                        "context_length": 8192}})
    write_run(live, tmp_path / "live")
    base = load_hardware("cpu-base").path
    assert cli_main(["calibrate", "decode-scale", str(tmp_path / "live"), "--hardware", "cpu-base",
                     "--out", str(tmp_path / "p.yaml")]) == 0
    assert "decode_scale 1.2" in capsys.readouterr().out
    hw = load_hardware(str(tmp_path / "p.yaml"))
    assert hw.overhead("sglang").decode_scale == pytest.approx(1.25, rel=0.06)
    assert hw.overhead("sglang").decode_scale_lone == pytest.approx(1.25, rel=0.06)
    assert hw.overhead("vllm-v1").decode_scale == 1.0          # only the run's engine family
    assert read_run(tmp_path / "live").meta["engine"] == "sglang-lpm"
    with pytest.raises(ServetwinError, match="no overheads for engine family 'nope'"):
        write_scaled(base, tmp_path / "q.yaml", "nope", decode_scale(live, live), "x")
