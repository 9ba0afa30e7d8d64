"""Turn probe records into (batch shape, measured step time) observations and fit a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.records import RunRecord, read_run
from calibrate.fit import FitResult, fit_steps, write_profile
from scenarios.errors import ServetwinError
from simulator.cost_model import BatchShape
from simulator.profiles import load_hardware, load_model

FREE = ("eta_compute", "eta_bandwidth", "step_graph_s", "step_eager_s", "per_seq_s")


def observations(rec: RunRecord) -> list[tuple[BatchShape, float, str]]:
    """(shape, seconds, kind) per probe: median over repeats of the same shape."""
    if rec.meta.get("source") != "probe":
        raise ServetwinError(f"{rec.path}: not a probe record (source {rec.meta.get('source')!r})")
    bs = int(rec.meta.get("engine_config", {}).get("block_size") or 16)
    req = rec.requests.set_index("request_id")
    groups: dict[tuple[str, int, int, int], list[float]] = {}
    for p in rec.meta["probes"]:
        r = req.loc[p["request_id"]]
        if not bool(r["ok"]):
            continue
        if p["kind"] == "decode":        # TPOT: robust to chunks that arrive bunched together
            n = int(r["output_tokens"])
            if n < 4:
                continue
            y = float((r["last_token_s"] - r["first_token_s"]) / (n - 1))
        else:
            y = float(r["first_token_s"] - r["send_s"])
        groups.setdefault((p["kind"], p["new_tokens"], p["context"], p["concurrency"]), []).append(y)
    out = []
    for (kind, n, ctx, c), ys in sorted(groups.items()):
        b = BatchShape()
        if kind == "prefill":
            b.add_prefill(n, 0, True)
        elif kind == "cached":
            hit = (ctx // bs) * bs                  # whole cached blocks of the shared part
            b.add_prefill(n + ctx - hit, hit, True)
        else:
            for _ in range(c):
                b.add_decode(ctx)
        out.append((b, float(np.median(ys)), kind))
    return out


def fit_probes(paths: list[str | Path], engine_family: str, model: str, base: str,
               out: str | Path) -> tuple[FitResult, list[tuple[BatchShape, float, str]]]:
    obs = [o for p in paths for o in observations(read_run(p))]
    if len(obs) < len(FREE):
        raise ServetwinError(f"only {len(obs)} usable probe observations; need at least {len(FREE)}")
    hw, mp = load_hardware(base), load_model(model)
    res = fit_steps(hw, mp, engine_family, [o[0] for o in obs], [o[1] for o in obs], free=FREE)
    quality: dict[str, Any] = {"method": "bounded relative least squares on probe step times",
                               "r2": round(res.r2, 4), "mape": round(res.mape, 4), "observations": len(obs),
                               "per_probe_error": [{"kind": k, "measured_s": round(y, 6), "error": round(e, 4)}
                                                   for (_, y, k), e in zip(obs, res.residuals, strict=True)],
                               "probes": [str(p) for p in paths]}
    write_profile(hw.path, out, engine_family, res.params, f"fitted by servetwin calibrate fit on {len(obs)} probes",
                  quality)
    _rename(Path(out))
    return res, obs


def _rename(path: Path) -> None:
    import yaml
    data = yaml.safe_load(path.read_text())
    data["name"] = path.stem
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=120))
