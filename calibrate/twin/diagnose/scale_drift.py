"""How well does what an instance measured before a run predict the scales it measures in the run? For each
engine instance of recorded twin studies, its study runs in the order it served them, each run's own decode
and prefill scales (``OUT/profiles/own-scale``, written by the study) against these predictors: the
calibration trace's (what the held-out twin uses: one 10-s trace per cell, pooled, which
the profile holds and this row reads), the run before's (the tracking twin's), and the
calibration trace pooled with the instance's first run (weighted by what each measured over: what a
calibration trace as long as both would have given), and the family's calibration traces (the geometric
mean of the calibration scales of every instance of the same engine in the study: one 30-s trace is a
noisy measure of an instance, and on one machine the instances of an engine may differ less than their
traces do) and the same traces pooled as the engine-pooled twin pools them (weighted by what each
instance measured over), and the instance's other seeds (its calibration trace pooled with its study runs of every
other seed, as the cross-validated twin takes them: ``calibrate.twin.own_scale.other_seeds``). Every
predictor is judged on the same runs — each instance's second and later — by the mean
|ln(measured / predicted)|.

``--by-instance`` tabulates instead where each instance's runs sat: its calibration scale, its engine's
pooled one (what the held-out twin uses), and its study runs pooled (weighted as the twin pools) with their
median and excess over the engine's pool, ln(runs / engine pooled) — whether an instance's speed is its
own, and whether it is its configuration's (the same configuration, study after study) or chance.

    servetwin twin-study diagnose scale-drift OUT [OUT ...] [--by-instance]
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.stats import geomean
from analysis.tables import print_table
from calibrate.twin.live import CONFIGS
from foundation.errors import ServetwinError

SCALES = ("decode_scale", "prefill_scale")
FAMILY = {"vllm": "vllm-v1", "sglang": "sglang"}
ENGINE_POOLED = "the engine's calibration traces, pooled (engine-pooled twin)"


@dataclass(frozen=True)
class Scale:
    value: float
    n: int            # what it was measured over (decode gaps, forwards, lone requests)


def read_scales(profile: Path, family: str) -> dict[str, Scale]:
    """The measured scales of one profile the study wrote (value, and the count its source names)."""
    ovh = yaml.safe_load(profile.read_text())["cost"]["overheads"][family]
    got = {}
    for key in SCALES:
        entry = ovh.get(key)
        if isinstance(entry, dict) and entry.get("basis") == "measured":
            n = re.findall(r"over (\d+)", str(entry.get("source", "")))
            if not n:
                raise ServetwinError(f"{profile}: {key} has no 'over N' in its source")
            got[key] = Scale(float(entry["value"]), int(n[-1]))
    return got


def instance_runs(out: Path, label: str, family: str) -> list[tuple[str, dict[str, Scale]]]:
    """The seed and scales of each of the instance's study runs, in the order it served them."""
    runs = []
    for prof in (out / "profiles" / "own-scale").glob(f"*/{label}/seed-*.yaml"):
        run_json = out / "live" / prof.parent.parent.name / label / prof.stem / "run.json"
        start = json.loads(run_json.read_text())["run_window"]["start_unix"]
        runs.append((float(start), prof.stem, read_scales(prof, family)))
    return [(seed, s) for _, seed, s in sorted(runs, key=lambda r: r[0])]


def pooled(parts: list[Scale]) -> float:
    """Scales measured on several runs as one: geometric mean weighted by what each was measured over."""
    return geomean([p.value for p in parts], [p.n for p in parts])


def calibrations(out: Path) -> dict[str, dict[str, Scale]]:
    """Each configuration's calibration-trace scales, where the study wrote its profile."""
    got = {}
    for label, (engine, *_) in CONFIGS.items():
        cal_profile = out / "profiles" / f"{label}.yaml"
        if cal_profile.is_file():
            got[label] = read_scales(cal_profile, FAMILY[engine])
    return got


def family_scale(cals: dict[str, dict[str, Scale]], engine: str, key: str) -> float:
    """The geometric mean of one scale over the calibration traces of every instance of an engine (called
    for an instance that has it, so there is at least one)."""
    got = [c[key].value for label, c in cals.items() if CONFIGS[label][0] == engine and key in c]
    return geomean(got)


def engine_pooled(cals: dict[str, dict[str, Scale]], engine: str, key: str) -> float:
    """One scale over the calibration traces of every instance of an engine, pooled as the engine-pooled
    twin pools them (weighted by what each instance measured over; ``calibrate.twin.own_scale.engine_pooled``)."""
    return pooled([c[key] for label, c in cals.items() if CONFIGS[label][0] == engine and key in c])


def errors(out: Path) -> pd.DataFrame:
    """One row per instance, scale, predictor and judged run: |ln(measured / predicted)|."""
    rows = []
    cals = calibrations(out)
    for label, cal in cals.items():
        engine = CONFIGS[label][0]
        runs = instance_runs(out, label, FAMILY[engine])
        for key in SCALES:
            seq = [r.get(key) for _, r in runs]
            seeds = [seed for seed, _ in runs]
            if key not in cal or len(seq) < 2 or seq[0] is None:
                continue
            c, first = cal[key], seq[0]
            first_pooled = (c.value * c.n + first.value * first.n) / (c.n + first.n)
            family, engine_wide = family_scale(cals, engine, key), engine_pooled(cals, engine, key)
            for k in range(1, len(seq)):
                now, before = seq[k], seq[k - 1]
                if now is None or before is None:
                    continue
                others = pooled([c] + [s for s, seed in zip(seq, seeds, strict=True)
                                       if s is not None and seed != seeds[k]])
                for name, p in (("calibration trace", c.value), ("the run before", before.value),
                                ("calibration trace + first run", first_pooled),
                                ("the family's calibration traces", family),
                                (ENGINE_POOLED, engine_wide), ("the instance's other seeds", others)):
                    rows.append({"study": out.name, "config": label, "scale": key, "predictor": name,
                                 "abs_log_ratio": abs(float(np.log(now.value / p)))})
    return pd.DataFrame(rows)


def by_instance(out: Path) -> pd.DataFrame:
    """One row per instance and scale: its calibration, its engine's pool, its study runs pooled and their
    median, and the runs' excess over the engine's pool (see the module's docstring)."""
    rows = []
    cals = calibrations(out)
    for label, cal in cals.items():
        engine = CONFIGS[label][0]
        runs = [r for _, r in instance_runs(out, label, FAMILY[engine])]
        for key in SCALES:
            seq = [r[key] for r in runs if key in r]
            if key not in cal or not seq:
                continue
            pool, mine = engine_pooled(cals, engine, key), pooled(seq)
            rows.append({"study": out.name, "config": label, "scale": key, "calibration": cal[key].value,
                         "engine_pooled": pool, "runs": len(seq), "runs_pooled": mine,
                         "runs_median": float(np.median([r.value for r in seq])),
                         "excess_ln": float(np.log(mine / pool))})
    return pd.DataFrame(rows)


def instances(outs: list[Path]) -> pd.DataFrame:
    df = pd.concat([by_instance(o) for o in outs], ignore_index=True)
    if df.empty:
        raise ServetwinError("no instance with a measured calibration scale and study runs")
    return df


def summary(frames: list[pd.DataFrame]) -> pd.DataFrame:
    df = pd.concat(frames, ignore_index=True)
    if df.empty:
        raise ServetwinError("no instance with measured scales and two or more study runs")
    g = df.groupby(["scale", "predictor"], sort=False)["abs_log_ratio"]
    return g.agg(runs="size", mean_abs_log_ratio="mean").reset_index()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose scale-drift",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("studies", nargs="+", help="twin-study folders (OUT) whose reports were built")
    ap.add_argument("--by-instance", action="store_true",
                    help="where each instance's runs sat against its engine's pooled calibration")
    a = ap.parse_args(argv)
    outs = [Path(s) for s in a.studies]
    if a.by_instance:
        return print_table(lambda: instances(outs).round(4))
    return print_table(lambda: summary([errors(o) for o in outs]).round(4))
