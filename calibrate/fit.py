"""The fitted-model path: the cost model's coefficients by bounded least squares from measured step
times. A fitted profile is just another hardware profile file (coefficients marked ``fitted``, with
fit quality and provenance)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import HardwareProfile, ModelProfile, Overheads

PARAMS = ("eta_compute", "eta_bandwidth", "kappa_kv", "kappa_attn", "step_graph_s", "step_eager_s", "per_seq_s",
          "per_prefill_token_s", "per_prefill_seq_s")
# The efficiencies are against a profile's nominal peaks, which for the CPU profiles are an AVX-512/AMX core's
# bf16 rate: a CPU without AVX-512 runs bf16 matmuls far slower, and its probes fitted eta_compute 0.006 (vLLM)
# and 0.011 (SGLang), where a floor of 0.02 had held the fit at R² 0.93 / 0.89 (MAPE 22 % / 17 %) against
# 0.96 / 0.98 (11 % / 8 %) unbounded there; the floors sit an order of magnitude below anything fitted.
BOUNDS = {"eta_compute": (0.001, 1.0), "eta_bandwidth": (0.005, 1.0), "kappa_kv": (0.02, 20.0),
          "kappa_attn": (0.01, 20.0), "step_graph_s": (0.0, 0.5), "step_eager_s": (0.0, 0.5), "per_seq_s": (0.0, 0.01),
          "per_prefill_token_s": (0.0, 1e-3), "per_prefill_seq_s": (0.0, 0.2), "kv_shared_cost": (0.0, 1.0),
          "request_s": (0.0, 0.1)}
NATURAL_LIMITS = {("kv_shared_cost", 1.0)}    # besides a cost of 0: a limit a fitted value may rest on


def at_bound(params: dict[str, float], rel: float = 1e-4) -> list[str]:
    """The fitted coefficients that ended on a bound of the fit (not on a natural limit: a cost of 0, an
    unshared KV read): there the bound, not the probes, set the value, and the fit says less than its R²."""
    out = []
    for k, v in params.items():
        for edge in BOUNDS[k]:
            if edge != 0.0 and (k, edge) not in NATURAL_LIMITS and abs(v - edge) <= rel * abs(edge):
                out.append(k)
    return out


HARDWARE_PARAMS = ("eta_compute", "eta_bandwidth", "kappa_kv", "kappa_attn", "kv_shared_cost")  # the rest: overheads


def with_params(hw: HardwareProfile, family: str, theta: dict[str, float]) -> HardwareProfile:
    base = dataclasses.asdict(hw.overhead(family))
    ovh = Overheads(**{k: theta.get(k, v) for k, v in base.items()})
    return dataclasses.replace(hw, overheads={**hw.overheads, family: ovh},
                               **{k: theta.get(k, getattr(hw, k)) for k in HARDWARE_PARAMS})


@dataclasses.dataclass
class FitResult:
    params: dict[str, float]
    r2: float
    mape: float
    residuals: list[float]

    @property
    def at_bound(self) -> list[str]:
        return at_bound(self.params)


Steps = list[tuple[float, BatchShape]]       # weighted steps whose summed time is one observation


@dataclasses.dataclass
class Window:
    """A request's window as a client sees it (send → first token): its steps plus, once, the front end's
    per-request latency and the output path's (``request_s``, ``deliver_s``)."""
    steps: Steps


Observed = BatchShape | Steps | Window


def predict_time(cm: CostModel, obs: Observed) -> float:
    if isinstance(obs, BatchShape):
        return cm.step_time(obs)
    if isinstance(obs, Window):
        return cm.request_latency + cm.delivery_latency + predict_time(cm, obs.steps)
    return sum(w * cm.step_time(b) for w, b in obs)


def fit_steps(hw: HardwareProfile, model: ModelProfile, family: str, batches: Sequence[Observed],
              measured_s: Sequence[float], free: Sequence[str] = PARAMS, graph_max_bs: int = 256,
              extend_full_attention: bool = False) -> FitResult:
    """Fit the ``free`` coefficients to measured step times — or sums of weighted steps — (relative least
    squares, bounded)."""
    y = np.asarray(measured_s, dtype=float)
    free = list(free)
    own = {k: v for k, v in dataclasses.asdict(hw.overhead(family)).items() if v is not None}  # family's own
    start = {**{k: getattr(hw, k) for k in HARDWARE_PARAMS}, **own}
    x0 = np.array([min(max(start[p], BOUNDS[p][0]), BOUNDS[p][1]) for p in free])

    def predict(x: np.ndarray) -> np.ndarray:
        cm = CostModel(with_params(hw, family, dict(zip(free, x, strict=True))), model, family, 1, graph_max_bs,
                       extend_full_attention)
        return np.array([predict_time(cm, b) for b in batches])

    res = least_squares(lambda x: (predict(x) - y) / y, x0, bounds=([BOUNDS[p][0] for p in free],
                                                                   [BOUNDS[p][1] for p in free]))
    pred = predict(res.x)
    ss_res = float(((pred - y) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
    return FitResult(dict(zip(free, map(float, res.x), strict=True)), 1 - ss_res / ss_tot,
                     float(np.mean(np.abs(pred - y) / y)), list(map(float, (pred - y) / y)))


def write_profile(src: str | Path, out: str | Path, family: str, params: dict[str, float], source: str,
                  quality: dict[str, Any]) -> Path:
    """Copy a hardware profile, replacing the fitted numbers (basis: fitted) and recording the fit."""
    data = yaml.safe_load(Path(src).read_text())
    cost = data["cost"]
    for k, v in params.items():
        node = {"value": round(float(v), 6), "basis": "fitted", "source": source}
        if k in HARDWARE_PARAMS:
            cost[k] = node
        else:
            cost["overheads"][family][k] = node
    data["fit"] = quality
    return dump_profile(out, data)


PROFILE_HEAD = "# servetwin:profile — a hardware profile written by servetwin (every number with its source)\n"


def dump_profile(out: str | Path, data: dict[str, Any]) -> Path:
    """Write a profile YAML atomically; an existing file is replaced only when servetwin wrote it."""
    from foundation.outputs import write_file
    return write_file(out, PROFILE_HEAD + yaml.safe_dump(data, sort_keys=False, width=120), "profile")
