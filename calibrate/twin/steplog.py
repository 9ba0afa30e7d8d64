"""What an engine instance's runs measure for the twin study beyond its decode scale: its prefill scale,
(from an SGLang step log, calibrate/step_log.py) its latencies outside the forwards, and (from a vLLM step
log, ``--vllm-step-log``) its front-end loop (``with_front_end``: calibrate.vllm_front_end).

**Prefill scale.** An SGLang instance's forwards with prefill ran 1.00–1.07× their probe-fitted price on the
calibration traces of one study's three SGLang instances (docs/studies/twin-2-engine-timing.md)
and 0.97–1.40× (Σ measured / Σ priced) in their study runs: the instance's prefill speed under load, as
``decode_scale`` is its decode speed. vLLM writes no step log; its prefill scale comes from the requests a run
served alone (``calibrate.lone_prefill``: 0.98–1.21 on the calibration traces of eight studies). Each
instance's profile takes the scale its calibration trace measured (held out); the tracking twin the scale of
the run before (``calibrate.twin.own_scale``).

**Latencies outside its forwards** (``--no-path-latencies`` leaves them out): the front end's (send to
the scheduler's receipt: 4.0–6.2 ms at an idle scheduler in 26 of that study's 27 SGLang runs) and the
output path's (results processed to the first token at the client: 2.4–5.9 ms median per run, 9.6 in
one under load), measured on the calibration trace. Fitted with them, the probes put less in each
prefill step (that study: 10.1 ms per step instead of 17.1), whose forwards the calibration trace then
measures at a prefill scale of its own (1.04–1.12 instead of 1.00–1.07).

They are latencies, not engine time: a request's dependants are sent when its last token reaches the
client, and reach the scheduler after the front end, so the forward started meanwhile runs without them.
The probe fit charges each probe's window both latencies (``fit.Window``) instead of its steps: the family
fit takes the probed instance's, each instance's profile its own (the tracking and own-scale twins, built
on the family fit, keep the probed instance's). A study recorded without step logs
keeps both at 0 (its reports regenerate unchanged).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any, NamedTuple

from analysis.records import read_run
from calibrate.compare import twin
from calibrate.decode_load import overhead_family
from calibrate.engine_steps import prefill_scale, sglang_cost
from calibrate.lone_prefill import lone_prefill_scale
from calibrate.step_log import live_window, measured_latencies, write_latencies, write_measured
from calibrate.twin.live import CONFIGS, KNEE_PROBES, calibration_dirs
from calibrate.vllm_front_end import FrontEndFit, fit_loop
from live.sglang_steplog import read_events
from live.vllm_steplog import read_steps
from simulator.profiles import load_hardware

MODEL = "tiny-llama"


def step_log(out: Path, label: str) -> Path:
    """Where the study's instance of this configuration wrote its step log (``PREFIX.<pid>`` files)."""
    return out / "logs" / f"{label}.steps"


def has_step_log(out: Path, label: str) -> bool:
    return CONFIGS[label][0] == "sglang" and bool(glob.glob(f"{step_log(out, label)}.*"))


class PrefillScale(NamedTuple):
    scale: float
    n: int              # forwards (step log) or requests served alone it was measured over
    family: str         # the profile's engine family it scales
    basis: str          # how it was measured


def run_prefill_scale(out: Path, label: str, run_dir: Path, profile: str | Path) -> PrefillScale | None:
    """The prefill scale of one run of the instance against ``profile``: for SGLang, Σ measured / Σ priced
    over the forwards with prefill its step log shows in the run's window; for vLLM, from the requests the
    run served alone (``calibrate.lone_prefill``). None: an SGLang instance without a step log, or too few
    forwards or lone requests."""
    run = read_run(run_dir)
    if CONFIGS[label][0] == "sglang":
        if not has_step_log(out, label):
            return None
        forwards, _ = live_window(read_events(step_log(out, label)), run)
        backend = run.meta.get("engine_config", {}).get("attention_backend")
        found = prefill_scale(forwards, sglang_cost(profile, MODEL, backend))
        return None if found is None else PrefillScale(
            *found, "sglang", f"step log, forwards with prefill, Σ measured / Σ priced over {found[1]}")
    family = overhead_family(run)
    ovh = load_hardware(str(profile)).overhead(family)
    own = ovh.front_end_step_s + ovh.stream_chunk_s         # a lone stream's own wait on the front-end loop
    lone = lone_prefill_scale(run, twin(run, str(profile), MODEL), ovh.request_s + ovh.deliver_s + own)
    return None if lone is None else PrefillScale(
        *lone, family, f"requests served alone, TTFT beyond the fixed latencies, median live / twin over {lone[1]}")


def with_prefill_scale(profile: Path, found: PrefillScale | None, source: str, dest: Path | None = None) -> Path:
    """The profile with a measured prefill scale (unchanged, or copied to ``dest``, when none was)."""
    if found is None:
        if dest is not None and dest != profile:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(Path(profile).read_text())
            return dest
        return profile
    return write_measured(profile, dest or profile, found.family,
                          {"prefill_scale": (found.scale, f"{source}: {found.basis}")})


def instance_latencies(out: Path, label: str) -> dict[str, Any] | None:
    """The instance's latencies on the first calibration trace it served, or None (not SGLang, or no step
    log or calibration run)."""
    cal = calibration_dirs(out, label)
    if not has_step_log(out, label) or not cal:
        return None
    return measured_latencies(cal[0], step_log(out, label))


def fit_base(out: Path, family: str, base: str = "cpu-base") -> str:
    """The profile a family's probe fit starts from: ``base``, with — for SGLang — the latencies of the
    instance that was probed in its default configuration."""
    lat = instance_latencies(out, KNEE_PROBES) if family == "sglang" else None
    if lat is None:
        return base
    dest = out / "profiles" / f"base-{family}.yaml"
    return str(write_latencies(load_hardware(base).path, dest, "sglang", lat,
                               str(calibration_dirs(out, KNEE_PROBES)[0].relative_to(out))))


def vllm_step_log(out: Path, label: str) -> Path | None:
    """The step log a vLLM instance of the study wrote (``--vllm-step-log``), or None."""
    path = step_log(out, label)
    return path if CONFIGS[label][0] == "vllm" and path.is_file() else None


def with_front_end(out: Path, label: str, profile: Path) -> Path:
    """A vLLM instance's base profile: ``profile`` (its family's probe fit) with the instance's front-end loop
    — its time per step and the spacing of a step's streams — fitted on its calibration traces and step log
    (``calibrate.vllm_front_end``), at ``OUT/profiles/front-end/<label>.yaml``; ``profile`` itself without a
    step log. Where its own traces have too few requests to fit (a slow host: few reach an idle engine in one
    forward), the loop of the study's other vLLM instance: the loop is the API server's, the same build on the
    same host whatever the chunk budget. Its decode and prefill scales are then measured on top of it."""
    if vllm_step_log(out, label) is None:
        return profile
    others = [other for other in CONFIGS if other != label and vllm_step_log(out, other) is not None]
    for source in (label, *others):
        got = instance_loop(out, source, profile)
        if got is not None:
            fit, family, basis = got
            if source != label:
                basis += f"; {label}'s own calibration traces had too few requests to fit"
            return write_measured(profile, out / "profiles" / "front-end" / f"{label}.yaml", family,
                                  {"front_end_step_s": (fit.step_s, basis),
                                   "stream_chunk_s": (fit.chunk_s, f"{basis}; output path per stream position")})
    return profile


def instance_loop(out: Path, label: str, profile: Path) -> tuple[FrontEndFit, str, str] | None:
    """A vLLM instance's front-end loop fitted on its calibration traces and step log, with its engine family
    and where it was measured; None without them or with too few requests."""
    log, cal = vllm_step_log(out, label), calibration_dirs(out, label)
    if log is None or not cal:
        return None
    steps = read_steps(log)
    runs = [(read_run(d), steps) for d in cal]
    fit = fit_loop(runs, str(profile), MODEL)
    if fit is None:
        return None
    basis = (f"{cal[0].parent.parent.relative_to(out)}: step log, time lost to missed forwards per busy "
             f"request {fit.live_lost_s * 1000:.2f} ms live, {fit.twin_lost_s * 1000:.2f} ms twin "
             f"({fit.idle} idle, {fit.busy} busy requests)")
    return fit, overhead_family(runs[0][0]), basis


def with_own_latencies(out: Path, label: str, profile: Path) -> Path:
    """The instance's profile with its own latencies (unchanged where none were measured): SGLang's front
    end and output path (a vLLM instance's front-end loop is in its base profile: ``with_front_end``)."""
    lat = instance_latencies(out, label)
    if lat is None:
        return profile
    return write_latencies(profile, profile, "sglang", lat, str(calibration_dirs(out, label)[0].relative_to(out)))
