"""One engine instance's decode steps under serving load, against its fitted profile: measured on a
calibration trace (a seed the comparison does not use), applied as the profile's ``decode_scale``.

Probes time decode steps with the engine otherwise idle; serving an agent trace, one SGLang instance
here decoded 4–22 % slower than its own probes had just measured (and as fast again after the trace),
and two instances of one vLLM configuration decode a lone request at 1.25 and 1.59 ms per token. Neither
shows in a probe fit. The measurement:
every gap between two streamed tokens of a request during which no other request's prefill finished
(no first token inside it) is one or more decode steps; grouped by the number of requests streaming at
its midpoint, the live run's mean gap is divided by its simulated twin's (the same trace, the unscaled
profile) at the same count, and the ratios are averaged (geometric mean, weighted by the live gaps in
each group). The mean, because a request's decode time is the sum of its gaps: live gaps have a longer
tail than the twin's, and a scale of medians leaves that tail out of every E2E. ``--statistic median``
compares typical gaps instead (TPOT p50 rather than E2E). The twin's gaps carry the profile's own decode
steps at the trace's real contexts and sharing, so the ratio is the instance's decode speed relative to
the profile, not to a probe shape.

A lone request's decode is measured apart: the gaps with one request streaming give ``decode_scale_lone``
(the scale of a pure-decode step of one request), those with two or more ``decode_scale``. In the two
studies on the AMD EPYC (docs/studies/twin-3-calibration.md) a lone request decoded relatively faster than concurrent
ones in 77 of 90 runs (by 11 % on the mean of log ratios), while between 2 and 30
streaming the ratio barely moved; one scale averaged over both made the twin decode too fast wherever a
run had fewer lone gaps than its calibration trace (a higher rate) and too slow where it had more. Where
no count had two or more streaming, ``decode_scale`` is the lone ratio too.

    python -m calibrate.decode_load LIVE_RUN --hardware PROFILE --out PROFILE_OUT [--statistic mean|median]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from analysis.records import RunRecord, read_run
from analysis.stats import geomean
from analysis.tables import to_markdown
from calibrate.compare import twin
from calibrate.gates import PoorFit, scale_failure
from calibrate.streams import token_gaps
from calibrate.translate import translate
from foundation.errors import ServetwinError
from simulator.presets import PRESETS
from simulator.profiles import load_hardware

MIN_GAPS = 20            # per streaming count, on each side, for its ratio to count
STATISTICS = ("mean", "median")     # how a streaming count's gaps are summarised on each side


@dataclass
class DecodeScale:
    scale: float                   # concurrent decodes (2+ streaming; all counts where none had 2+)
    gaps: int                      # live decode gaps that entered it
    by_streams: pd.DataFrame       # streaming, live_gaps, live_<statistic>_s, twin_gaps, twin_<statistic>_s, ratio
    statistic: str = "mean"
    lone: float | None = None      # a lone request's decode (1 streaming), where it had its own ratio
    lone_gaps: int = 0


def decode_gaps(rec: RunRecord) -> pd.DataFrame:
    """Token gaps with no other request's prefill finishing inside them."""
    g = token_gaps(rec)
    return g[(g["prefills_inside"] == 0) & (g["streaming"] >= 1)]


def decode_scale(live: RunRecord, sim: RunRecord, min_gaps: int = MIN_GAPS, statistic: str = "mean") -> DecodeScale:
    """The live run's decode gaps over its twin's, by streaming count (see the module's docstring)."""
    if statistic not in STATISTICS:
        raise ServetwinError(f"decode scale: statistic {statistic!r} unknown; accepted: {', '.join(STATISTICS)}")
    lv = decode_gaps(live).groupby("streaming")["gap_s"].agg(["count", statistic])
    sm = decode_gaps(sim).groupby("streaming")["gap_s"].agg(["count", statistic])
    j = lv.add_suffix("_live").join(sm.add_suffix("_twin"), how="inner")
    j = j[(j["count_live"] >= min_gaps) & (j["count_twin"] >= min_gaps)]
    if j.empty:
        raise ServetwinError(f"{live.path}: no streaming count with {min_gaps}+ decode gaps in both the run and "
                             "its twin; a calibration trace needs concurrent streams (a longer run or a higher rate)")
    ratio = j[f"{statistic}_live"] / j[f"{statistic}_twin"]
    table = pd.DataFrame({"streaming": j.index, "live_gaps": j["count_live"].to_numpy(),
                          f"live_{statistic}_s": j[f"{statistic}_live"].to_numpy(),
                          "twin_gaps": j["count_twin"].to_numpy(),
                          f"twin_{statistic}_s": j[f"{statistic}_twin"].to_numpy(), "ratio": ratio.to_numpy()})
    lone, rest = table[table["streaming"] == 1], table[table["streaming"] >= 2]
    conc = rest if not rest.empty else table
    return DecodeScale(weighted_scale(conc), int(conc["live_gaps"].sum()), table, statistic,
                       weighted_scale(lone) if not lone.empty else None, int(lone["live_gaps"].sum()))


def weighted_scale(rows: pd.DataFrame) -> float:
    """The geometric mean of the rows' ratios, weighted by their live gaps."""
    return geomean(rows["ratio"], rows["live_gaps"])


def overhead_family(live: RunRecord) -> str:
    """The profile's overhead family the live run's configuration is simulated with."""
    preset = translate(live.meta["engine_config"], str(live.path)).preset
    return str(PRESETS[preset][0].model_fields["family"].default)


def measure(live_run: str | Path | RunRecord, hardware: str, model: str, statistic: str = "mean") -> DecodeScale:
    """The decode scale of the instance that served ``live_run``, against ``hardware``."""
    live = live_run if isinstance(live_run, RunRecord) else read_run(live_run)
    if live.meta.get("source") != "live":
        raise ServetwinError(f"{live.path}: not a live run (source {live.meta.get('source')!r})")
    if live.chunks is None:
        raise ServetwinError(f"{live.path}: no per-token times (chunks.parquet) to measure decode gaps from")
    return decode_scale(live, twin(live, hardware, model, record_tokens=True), statistic=statistic)


def gate(found: DecodeScale, base: str) -> str | None:
    """Why this decode scale fails the quality gates (calibrate/gates.py), or None: a base profile that
    failed its own, or streaming counts whose ratios one scale does not describe."""
    mark = load_hardware(base).poor_fit
    if mark:
        return f"its base profile {base} failed its own gates ({mark})"
    conc = found.by_streams[found.by_streams["streaming"] >= 2]
    rows = conc if not conc.empty else found.by_streams
    return scale_failure(rows["ratio"], rows["live_gaps"], found.scale)


def scale_profile(live_run: str | Path, hardware: str, model: str, out: str | Path,
                  source: str | None = None, statistic: str = "mean",
                  accept_poor_fit: bool = False) -> tuple[DecodeScale, str, Path]:
    """Measure the run's decode scale and write ``hardware`` with it for the run's engine family:
    (what was found, that family, the profile written). A scale that fails the gates raises PoorFit."""
    live = read_run(live_run)
    found = measure(live, hardware, model, statistic)
    family = overhead_family(live)
    why = gate(found, hardware)
    if why and not accept_poor_fit:
        raise PoorFit(f"decode scale {found.scale:.3f} of {live_run} fails its quality gates: {why}; nothing "
                      "written (--accept-poor-fit writes it anyway, marked)")
    dest = write_scaled(load_hardware(hardware).path, out, family, found, source or str(live_run),
                        f"decode scale: {why}" if why else None)
    return found, family, dest


def write_scaled(hardware_yaml: str | Path, out: str | Path, family: str, found: DecodeScale, source: str,
                 poor_fit: str | None = None) -> Path:
    """Copy a profile YAML with ``decode_scale`` set for one engine family (basis: measured); ``poor_fit``
    marks a scale written although it failed its gates."""
    data = yaml.safe_load(Path(hardware_yaml).read_text())
    if poor_fit:
        data.setdefault("fit", {})["poor_fit"] = poor_fit
    ovh = data.setdefault("cost", {}).setdefault("overheads", {})
    if family not in ovh:
        raise ServetwinError(f"{hardware_yaml}: no overheads for engine family {family!r}; it has {sorted(ovh)}")
    ovh[family]["decode_scale"] = {"value": round(found.scale, 4), "basis": "measured",
                                   "source": f"{source}: live / twin decode gaps ({found.statistic}) "
                                             f"{'with 2+ streaming ' if found.lone is not None else ''}"
                                             f"over {found.gaps} gaps"}
    ovh[family].pop("decode_scale_lone", None)
    if found.lone is not None:
        ovh[family]["decode_scale_lone"] = {"value": round(found.lone, 4), "basis": "measured",
                                            "source": f"{source}: live / twin decode gaps ({found.statistic}) "
                                                      f"with 1 streaming over {found.lone_gaps} gaps"}
    from calibrate.fit import dump_profile
    return dump_profile(out, data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("live_run")
    ap.add_argument("--hardware", required=True, help="the fitted profile, name or YAML (its decode_scale is replaced)")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--out", required=True, help="where to write the profile with the measured decode_scale")
    ap.add_argument("--statistic", default="mean", choices=STATISTICS, help="summary of each count's gaps")
    a = ap.parse_args(argv)
    return run(a.live_run, a.hardware, a.model, a.out, a.statistic)


def run(live_run: str, hardware: str, model: str, out: str, statistic: str = "mean",
        accept_poor_fit: bool = False) -> int:
    found, family, dest = scale_profile(live_run, hardware, model, out, statistic=statistic,
                                        accept_poor_fit=accept_poor_fit)
    print(to_markdown(found.by_streams))
    lone = f"; lone request {found.lone:.3f} ({found.lone_gaps} gaps)" if found.lone is not None else ""
    print(f"decode_scale {found.scale:.3f} ({family}, {statistic} of {found.gaps} live decode gaps){lone} → {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
