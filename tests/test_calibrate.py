"""The fitted-model path recovers known coefficients from step times synthesised with noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibrate.fit import BOUNDS, fit_steps, with_params, write_profile
from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import load_hardware, load_model

HW = load_hardware("l4-base")
M = load_model("llama-3.1-8b")
TRUE = {"eta_compute": 0.31, "eta_bandwidth": 0.66, "step_graph_s": 0.004, "step_eager_s": 0.009}


def batches(rng: np.random.Generator) -> list[BatchShape]:
    out = []
    for _ in range(120):
        b = BatchShape()
        kind = rng.integers(3)
        if kind != 1:
            for _ in range(rng.integers(1, 3)):
                b.add_prefill(int(rng.integers(16, 4096)), int(rng.integers(0, 4096)), True)
        if kind != 0:
            for _ in range(rng.integers(1, 40)):
                b.add_decode(int(rng.integers(100, 6000)))
        out.append(b)
    return out


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    bs = batches(rng)
    truth = CostModel(with_params(HW, "vllm-v0", TRUE), M, "vllm-v0")
    y = np.array([truth.step_time(b) for b in bs]) * rng.normal(1.0, 0.02, size=len(bs))
    res = fit_steps(HW, M, "vllm-v0", bs, y, free=list(TRUE))
    for k, v in TRUE.items():
        assert res.params[k] == pytest.approx(v, rel=0.15), k
    assert res.r2 > 0.99 and res.mape < 0.03


def fit_truth(truth: dict[str, float]):
    rng = np.random.default_rng(1)
    bs = batches(rng)
    cm = CostModel(with_params(HW, "vllm-v0", truth), M, "vllm-v0")
    y = np.array([cm.step_time(b) for b in bs]) * rng.normal(1.0, 0.02, size=len(bs))
    return fit_steps(HW, M, "vllm-v0", bs, y, free=list(truth))


def test_a_cpu_without_avx512s_compute_efficiency_is_fitted_not_floored():
    """A CPU without AVX-512 fitted eta_compute 0.006 against the nominal bf16 peak: the fit reaches it."""
    res = fit_truth({**TRUE, "eta_compute": 0.006})
    assert res.params["eta_compute"] == pytest.approx(0.006, rel=0.15)
    assert res.at_bound == [] and res.mape < 0.03


def test_a_coefficient_the_bound_set_is_named():
    floor = BOUNDS["eta_compute"][0]
    res = fit_truth({**TRUE, "eta_compute": floor / 5})
    assert res.params["eta_compute"] == pytest.approx(floor)
    assert "eta_compute" in res.at_bound         # and what it pushed elsewhere: the step overheads to their ceiling
    assert not fit_truth(TRUE).at_bound


def test_fitted_profile_is_a_profile(tmp_path: Path):
    out = write_profile(HW.path, tmp_path / "fitted.yaml", "vllm-v0", TRUE, "test fit", {"r2": 0.99})
    hw = load_hardware(str(out))
    assert hw.eta_compute == pytest.approx(0.31) and hw.overhead("vllm-v0").step_eager_s == pytest.approx(0.009)


def test_mixed_probe_stops_its_decodes_when_its_window_closes(tmp_path: Path):
    """A mixed probe measures the decode streams only inside the prompt's prefill window; their streams are
    then closed (an engine aborts them), not left to run out their long outputs."""
    from calibrate.probes import ProbePlan, probe
    from tests.fake_openai import FakeOpenAI
    srv = FakeOpenAI(token_s=0.005).start()
    try:
        plan = ProbePlan(prefill_lengths=(), cached=(), decode_batches=(), shared_decode=(), mixed=((64, 3),),
                         decode_tokens=1000, repeats=1, warm_passes=0)
        rec = probe(srv.url, "fake", tmp_path / "probe", plan)
    finally:
        srv.stop()
    (window,) = rec.meta["mixed_windows"].values()
    assert window["decode_tokens_in_window"] > 0                  # the decodes streamed through the window
    longs = [sent for wanted, sent in srv.streamed if wanted == 4000]
    assert len(longs) == 3 and max(longs) < 1000                 # and were stopped long before 4,000 tokens
