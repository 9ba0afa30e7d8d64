"""Where each request's time to first token goes, live and in the twin, forward by forward.

A live SGLang run's step log (``SglangCpu(step_log=PREFIX)``, live/sglang_cpu/steplog) says when the
scheduler received each request and which forwards ran it; the twin's step log (``simulate(step_log=…)``)
says the same for the simulated run of the identical trace. Per request, TTFT splits into

- ``wait``: from the client's send to the start of the first forward that computes it (the front end, the
  forward under way, the queue);
- ``prefill``: from that start to the end of the forward that computes its last prompt token (chunks and
  the forwards between them included);
- ``after``: from there to the first token at the client (on a CPU, SGLang streams a batch's tokens after
  the next forward; then the delivery path).

Requests pair exactly (same trace), so the tables give each component's median live and in the twin and
the median of the per-request differences; a second table compares the forwards themselves by mode.

    servetwin twin-study diagnose step-timeline --study OUT [--config sglang-lpm] [--cell rate0.39-sigma0.9]
                                      [--calibration engine|instance]
    servetwin twin-study diagnose step-timeline RUN_DIR --steps PREFIX --hardware PROFILE [--model tiny-llama]

With ``--study`` each run is priced by the profile of the study's held-out twin: its engine's calibration
traces pooled (``OUT/profiles/engine-pooled/<config>.yaml``, the study's default), or with ``--calibration
instance`` its own instance's (``OUT/profiles/<config>.yaml``); ``extend_x`` and ``decode_x`` are then how
fast the run's forwards ran against what that twin assumed.

Live step-log requests are matched to the run's records in order of arrival (calibrate/step_log.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.records import RunRecord, find_runs, read_run
from analysis.tables import to_markdown
from calibrate.compare import twin
from calibrate.engine_steps import priced, sglang_cost
from calibrate.step_log import live_window, path_latencies, prefill_ends
from calibrate.twin.args import CALIBRATIONS, calibrated_path
from foundation.errors import ServetwinError
from live.sglang_steplog import read_events

PARTS = ("wait", "prefill", "after", "ttft")


def per_request(runs: list[dict[str, Any]], requests: pd.DataFrame) -> pd.DataFrame:
    """Each request's TTFT split into wait, prefill and after (seconds), and the mode of the forward
    that followed its prefill."""
    first: dict[int, float] = {}
    for e in runs:
        for r in e["reqs"]:
            if len(r) == 3:
                first.setdefault(r[0], e["t0"])
    ends = prefill_ends(runs, requests)
    index = {id(e): k for k, e in enumerate(runs)}
    rows = []
    for q in requests.itertuples():
        i = int(q.request_id)
        if i not in ends or not np.isfinite(q.first_token_s):
            continue
        k = index[id(ends[i])]
        end = runs[k]["t1"]
        rows.append({"request_id": i, "role": q.role, "wait": first[i] - q.send_s, "prefill": end - first[i],
                     "after": q.first_token_s - end, "ttft": q.first_token_s - q.send_s,
                     "next": runs[k + 1]["mode"] if k + 1 < len(runs) else "none"})
    return pd.DataFrame(rows)


def paired(live: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """Per role (and all): each part's median live, in the twin, and the median per-request difference."""
    both = live.merge(sim, on=["request_id", "role"], suffixes=("_live", "_twin"))
    rows = []
    for role, g in [("all", both), *both.groupby("role")]:
        row: dict[str, Any] = {"role": role, "requests": len(g)}
        for p in PARTS:
            row[f"{p}_live_ms"] = 1000 * g[f"{p}_live"].median()
            row[f"{p}_twin_ms"] = 1000 * g[f"{p}_twin"].median()
            row[f"{p}_diff_ms"] = 1000 * (g[f"{p}_live"] - g[f"{p}_twin"]).median()
        row["next_extend_live"] = (g["next_live"] == "EXTEND").mean()
        row["next_extend_twin"] = (g["next_twin"] == "EXTEND").mean()
        rows.append(row)
    return pd.DataFrame(rows)


def forwards(runs: list[dict[str, Any]], source: str) -> pd.DataFrame:
    """Forwards by mode: how many, their median duration and batch size, the seconds they took."""
    df = pd.DataFrame({"mode": [e["mode"] for e in runs], "ms": [1000 * (e["t1"] - e["t0"]) for e in runs],
                       "requests": [len(e["reqs"]) for e in runs]})
    out = df.groupby("mode").agg(forwards=("ms", "size"), median_ms=("ms", "median"),
                                 mean_requests=("requests", "mean"), busy_s=("ms", "sum")).reset_index()
    out["busy_s"] /= 1000
    out.insert(0, "source", source)
    return out


def forward_speed(runs: list[dict[str, Any]], hardware: str, model: str, backend: str | None) -> dict[str, float]:
    """The run's forwards against the profile's price for the same batches: median measured/priced per mode
    (``calibrate.engine_steps``), i.e. how fast the instance ran in this run."""
    df = priced([e for e in runs if e["reqs"]], sglang_cost(hardware, model, backend))
    return {f"{m.lower()}_x": float(df.loc[df["mode"] == m, "ratio"].median()) for m in ("EXTEND", "DECODE")}


def compare_run(run: RunRecord, prefix: str | Path, hardware: str, model: str) -> dict[str, Any]:
    live_runs, received = live_window(read_events(prefix), run)
    sim_log: list[dict[str, Any]] = []
    sim = twin(run, hardware, model, step_log=sim_log)
    live_t, sim_t = per_request(live_runs, run.requests), per_request(sim_log, sim.requests)
    backend = run.meta.get("engine_config", {}).get("attention_backend")
    return {"parts": paired(live_t, sim_t), "latencies": path_latencies(live_runs, received, run.requests),
            "speed": forward_speed(live_runs, hardware, model, backend),
            "forwards": pd.concat([forwards(live_runs, "live"), forwards(sim_log, "twin")], ignore_index=True)}


def calibrated_profile(out: Path, label: str, calibration: str) -> Path:
    """The profile the study's held-out twin of this configuration used under ``calibration``."""
    path = calibrated_path(out, label, calibration)
    if not path.is_file():
        raise ServetwinError(f"{path}: not found; the study's report writes it (servetwin twin-study --report-only)")
    return path


def study_runs(out: Path, config: str | None, cell: str | None,
               calibration: str = CALIBRATIONS[0]) -> list[tuple[RunRecord, Path, Path]]:
    """A twin study's SGLang runs with their instance's step log and the held-out twin's profile."""
    found = []
    for p in find_runs([out / "live"]):
        run = read_run(p)
        label = str(run.meta["engine"])
        if not label.startswith("sglang") or (config and label != config) or (cell and p.parent.parent.name != cell):
            continue
        found.append((run, out / "logs" / f"{label}.steps", calibrated_profile(out, label, calibration)))
    if not found:
        raise ServetwinError(f"{out}/live: no SGLang runs{f' of {config}' if config else ''}"
                             f"{f' in {cell}' if cell else ''}")
    return found


def study_table(out: Path, config: str | None, cell: str | None, model: str,
                calibration: str = CALIBRATIONS[0]) -> pd.DataFrame:
    """One row per run: TTFT p50 live and twin, the median per-request difference of each part, the
    engine's latencies outside its forwards, and how fast its forwards ran against the profile's price
    (``extend_x``, ``decode_x``: medians of measured / priced)."""
    rows = []
    for run, prefix, profile in study_runs(out, config, cell, calibration):
        res = compare_run(run, prefix, str(profile), model)
        parts, lat = res["parts"], res["latencies"]
        a = parts[parts["role"] == "all"].iloc[0]
        assert run.path is not None
        rows.append({"cell": run.path.parent.parent.name, "config": run.meta["engine"], "seed": run.meta["seed"],
                     **{k: a[k] for k in ("ttft_live_ms", "ttft_twin_ms", "wait_diff_ms", "prefill_diff_ms",
                                          "after_diff_ms", "next_extend_live", "next_extend_twin")},
                     "inbound_ms": 1000 * lat["inbound_s"], "outbound_ms": 1000 * lat["outbound_s"],
                     **res["speed"]})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose step-timeline",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", help="a live SGLang run directory (with --steps and --hardware)")
    ap.add_argument("--steps", help="the instance's step-log prefix (files PREFIX.<pid>)")
    ap.add_argument("--hardware", help="the instance's fitted profile")
    ap.add_argument("--study", help="a twin study's output folder: every SGLang run, one row each")
    ap.add_argument("--config", help="with --study: one configuration (e.g. sglang-lpm)")
    ap.add_argument("--cell", help="with --study: one cell (e.g. rate0.39-sigma0.9)")
    ap.add_argument("--calibration", choices=CALIBRATIONS, default=CALIBRATIONS[0],
                    help="with --study: the held-out twin's profile to price the forwards by, its engine's "
                         "calibration traces pooled or its instance's own; default %(default)s")
    ap.add_argument("--model", default="tiny-llama")
    a = ap.parse_args(argv)
    if bool(a.study) == bool(a.run) or (a.run and not (a.steps and a.hardware)):
        ap.error("give either --study OUT, or RUN_DIR with --steps PREFIX and --hardware PROFILE")
    try:
        if a.study:
            print(to_markdown(study_table(Path(a.study), a.config, a.cell, a.model, a.calibration).round(3)))
        else:
            res = compare_run(read_run(a.run), a.steps, a.hardware, a.model)
            lat, speed = res["latencies"], res["speed"]
            print(to_markdown(res["parts"].round(3)), "", to_markdown(res["forwards"].round(3)), "",
                  f"forwards against the profile's price (median measured / priced): extends {speed['extend_x']:.2f}, "
                  f"decodes {speed['decode_x']:.2f}",
                  f"front end (send to the scheduler, idle scheduler): {1000 * lat['inbound_s']:.1f} ms median over "
                  f"{lat['inbound_n']} requests; output path (results processed to the first token at the client): "
                  f"{1000 * lat['outbound_s']:.1f} ms median over {lat['outbound_n']}", sep="\n")
    except ServetwinError as err:
        print(f"error: {err}")
        return 2
    return 0
