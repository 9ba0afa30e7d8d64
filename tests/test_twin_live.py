"""The two-engine study's engine schedule: one instance per configuration, probed before it serves its
runs, no run before the cells are known, nothing re-run on resume (engines, probes and runs faked)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import calibrate.twin.live as tl
import calibrate.twin.study as ts
from foundation.errors import SpecError


class FakeEngine:
    def __init__(self, label: str, events: list[tuple[str, ...]]):
        self.label, self.events = label, events
        self.url, self.pid, self.log_path = "http://fake", 1, Path("fake.log")

    def start(self) -> FakeEngine:
        self.events.append(("start", self.label))
        return self

    def stop(self) -> None:
        self.events.append(("stop", self.label))

    def pause(self) -> None:
        self.events.append(("pause", self.label))

    def resume(self) -> None:
        self.events.append(("resume", self.label))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    events: list[tuple[str, ...]] = []
    labels = {id(v[1]): k for k, v in tl.CONFIGS.items()}

    def engine(kind: str, opts: dict[str, Any], log: Path, vllm_steps: bool = False) -> FakeEngine:
        if vllm_steps:
            events.append(("vllm steps", labels[id(opts)]))
        return FakeEngine(labels[id(opts)], events)

    def probe(url: str, model: str, dest: Path, plan: Any, log: str) -> None:
        dest.mkdir(parents=True)
        (dest / "run.json").write_text("{}")
        events.append(("probe", dest.name))

    def run_live(trace: Any, cfg: Any, opts: Any, dest: Path) -> Any:
        dest.mkdir(parents=True)
        (dest / "run.json").write_text("{}")
        events.append(("run", opts.engine_label, dest.name, "/".join(dest.parts[-4:]), trace.duration_s))
        return SimpleNamespace(meta={"passed": True})

    def knee_cells(out: Path, quick: bool) -> list[tuple[float, float]]:
        events.append(("knee",))
        (out / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9]]}))
        return [(0.6, 0.9)]

    monkeypatch.setattr(tl, "engine", engine)
    monkeypatch.setattr(tl, "probe", probe)
    monkeypatch.setattr(tl, "run_live", run_live)
    monkeypatch.setattr(tl, "compile_trace", lambda sc: sc)
    monkeypatch.setattr(ts, "knee_cells", knee_cells)
    return events


def instances(events: list[tuple[str, ...]]) -> list[list[tuple[str, ...]]]:
    """What each started instance did, in order."""
    out: list[list[tuple[str, ...]]] = []
    for e in events:
        if e[0] == "start":
            out.append([e])
        elif out:
            out[-1].append(e)
    return out


def test_a_new_study_finds_its_cells_on_the_first_instance_and_starts_five(tmp_path: Path,
                                                                          fake: list[tuple[str, ...]]) -> None:
    tl.run_engines(tmp_path, [1, 2], 40.0, ts.study_cells(tmp_path, quick=True, rate=None))
    inst = instances(fake)
    assert [i[0][1] for i in inst] == list(tl.ORDER)       # one instance per configuration, none restarted
    first = inst[0]
    assert first[0][1] == tl.KNEE_PROBES
    knee = first.index(("knee",))                          # the knee is searched on the first instance's probes …
    assert [e[0] for e in first[1:knee]] == ["probe"]
    assert all(e[0] != "run" for e in first[:knee])        # … before any run
    for i in inst:
        label, did = i[0][1], [e for e in i if e[0] in ("probe", "run")]
        assert [e[0] for e in did][:1] == (["probe"] if label in tl.PROBED else ["run"])
        if did[0][0] == "probe":
            assert did[0][1] == tl.PROBED[label][0]
        assert [e[2] for e in did if e[0] == "run"] == ["seed-0", "seed-1", "seed-2"]   # calibration, then seeds


def test_pinned_cells_need_one_instance_per_configuration_and_a_resume_none(tmp_path: Path,
                                                                           fake: list[tuple[str, ...]]) -> None:
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9], [1.1, 0.9]]}))
    cells = ts.study_cells(tmp_path, quick=False, rate=None)
    tl.run_engines(tmp_path, [1], 45.0, cells)
    inst = instances(fake)
    assert [i[0][1] for i in inst] == list(tl.ORDER)
    for i in inst:
        did = [e for e in i if e[0] in ("probe", "run")]
        label = i[0][1]
        assert [e[0] for e in did] == (["probe"] if label in tl.PROBED else []) + ["run"] * 4
        runs = [(e[3], e[4]) for e in did if e[0] == "run"]     # a calibration trace of each cell, then seeds
        assert runs == [(f"calibration/{label}/rate0.6-sigma0.9/seed-0", tl.CALIBRATION_S / 2),
                        (f"calibration/{label}/rate1.1-sigma0.9/seed-0", tl.CALIBRATION_S / 2),
                        (f"live/rate0.6-sigma0.9/{label}/seed-1", 45.0),
                        (f"live/rate1.1-sigma0.9/{label}/seed-1", 45.0)]
    assert ("knee",) not in fake
    fake.clear()
    tl.run_engines(tmp_path, [1], 45.0, cells)             # everything recorded: no engine is started
    assert fake == []


def test_a_warm_up_comes_before_the_calibration_traces_and_only_then(tmp_path: Path,
                                                                     fake: list[tuple[str, ...]]) -> None:
    """With --warm-up each instance serves that many seconds of seed-4 traffic, spread over the cells, before
    its calibration traces; an instance whose calibration is recorded serves none, and no twin reads it."""
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9], [1.1, 0.9]]}))
    cells = ts.study_cells(tmp_path, quick=False, rate=None)
    tl.run_engines(tmp_path, [1], 45.0, cells, warm_up=60.0)
    for i in instances(fake):
        label = i[0][1]
        runs = [(e[3], e[4]) for e in i if e[0] == "run"]
        assert runs[:3] == [(f"warm-up/{label}/rate0.6-sigma0.9/seed-4", 30.0),
                            (f"warm-up/{label}/rate1.1-sigma0.9/seed-4", 30.0),
                            (f"calibration/{label}/rate0.6-sigma0.9/seed-0", tl.CALIBRATION_S / 2)]
    warm = tl.calibration_scenario(0.6, 0.9, 30.0, tl.WARM_UP_SEED)
    assert warm["seed"] == tl.WARM_UP_SEED != tl.calibration_scenario(0.6, 0.9, 15.0)["seed"]
    assert warm["arrivals"]["times"][0] == 0.0 and max(warm["arrivals"]["times"]) < 30.0
    for label in tl.CONFIGS:                     # a resumed study: its runs left, its calibration recorded
        run = tmp_path / "live" / "rate1.1-sigma0.9" / label / "seed-1"
        (run / "run.json").unlink()
        run.rmdir()
    fake.clear()
    tl.run_engines(tmp_path, [1], 45.0, cells, warm_up=60.0)
    assert [e[3] for e in fake if e[0] == "run"] == [f"live/rate1.1-sigma0.9/{label}/seed-1" for label in tl.ORDER]


def test_a_warm_up_of_no_seconds_is_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ts.main(["--out", "unused", "--report-only", "--warm-up", "-5"])
    assert "'-5': not a number of seconds; accepted: a number >= 0" in capsys.readouterr().err


def test_the_study_probes_its_own_request_shapes() -> None:
    """Every cached-prefix prefill a study request makes (its shared prefix cached, its own suffix new) is
    a probed shape in both probe plans: the fit need not extrapolate to the shape the study serves most."""
    from scenarios.spec import scenario_from_dict
    for sharing in (0.9, 0.5):
        prompts = scenario_from_dict(tl.scenario(0.3, sharing, 10.0, 1)).prompts
        for label, (_, plan) in tl.PROBED.items():
            assert (prompts.F, prompts.D) in plan.cached, (label, sharing)


def test_the_calibration_trace_serves_from_its_first_second() -> None:
    """An instance's calibration trace is its seed's gamma arrivals moved to start with the first DAG at 0,
    then CALIBRATION_S of them: no idle lead-in, the same prompts and graphs as the unmoved seed; a shorter
    one (a third of it, as each of three cells gets) is the same trace's first DAGs."""
    from scenarios.compiler import compile_trace
    from scenarios.spec import scenario_from_dict
    cal = compile_trace(scenario_from_dict(tl.calibration_scenario(0.39, 0.9)))
    plain = compile_trace(scenario_from_dict(tl.scenario(0.39, 0.9, 60.0, tl.CALIBRATION_SEED)))
    t, t0 = cal.arrays["arrival_s"], plain.arrays["arrival_s"]
    assert t.min() == 0.0 and t.max() < tl.CALIBRATION_S
    assert t0.min() > 10.0                            # the unmoved seed is idle for its first seconds
    n = cal.n_requests
    assert list(t) == list(t0[:n] - t0.min())         # the same arrivals, moved
    assert (cal.arrays["max_tokens"] == plain.arrays["max_tokens"][:n]).all()
    short = compile_trace(scenario_from_dict(tl.calibration_scenario(0.39, 0.9, tl.CALIBRATION_S / 3)))
    m = short.n_requests
    assert 0 < m < n and short.arrays["arrival_s"].max() < tl.CALIBRATION_S / 3
    assert list(short.arrays["arrival_s"]) == list(t[:m])
    for key in ("dag", "role", "max_tokens", "delay_s"):
        assert (short.arrays[key] == cal.arrays[key][:m]).all(), key


def test_an_instances_calibration_traces_are_read_in_the_order_it_served_them(tmp_path: Path) -> None:
    """One trace per cell (read in served order, not by name), a study recorded before with its single
    ``seed-0`` trace read as well, a closing trace beside it left alone, and a record without its start
    time refused by name."""
    from foundation.errors import ServetwinError

    def record(where: Path, start: float | None) -> None:
        where.mkdir(parents=True)
        (where / "run.json").write_text(json.dumps({"run_window": {} if start is None else {"start_unix": start}}))
    root = tmp_path / "calibration" / "vllm-c512"
    record(root / "rate0.36-sigma0.5" / "seed-0", 30.0)
    record(root / "rate0.36-sigma0.9" / "seed-0", 10.0)
    record(root / "rate0.66-sigma0.9" / "seed-0", 20.0)
    assert [d.parent.name for d in tl.calibration_dirs(tmp_path, "vllm-c512")] == [
        "rate0.36-sigma0.9", "rate0.66-sigma0.9", "rate0.36-sigma0.5"]
    old = tmp_path / "old" / "calibration" / "vllm-c512"
    record(old / "seed-0", 5.0)
    record(old / "seed-0-closing", 50.0)
    assert tl.calibration_dirs(tmp_path / "old", "vllm-c512") == [old / "seed-0"]
    assert tl.calibration_dirs(tmp_path, "sglang-lpm") == []
    record(root / "rate9-sigma0.9" / "seed-0", None)
    with pytest.raises(ServetwinError, match=r"rate9-sigma0.9/seed-0/run.json: run_window.start_unix missing"):
        tl.calibration_dirs(tmp_path, "vllm-c512")


def test_a_study_calibrated_on_one_trace_records_no_per_cell_traces_when_resumed(tmp_path: Path) -> None:
    """Regenerating (or resuming) a study recorded before per-cell calibration traces, whose instances each served
    one calibration trace, starts no engine for per-cell traces: they would come from a new instance."""
    cells = [(0.36, 0.9), (0.66, 0.9)]
    for r, s in cells:
        for seed in (1, 2):
            (tmp_path / "live" / tl.cell(r, s) / "vllm-c512" / f"seed-{seed}").mkdir(parents=True)
            (tmp_path / "live" / tl.cell(r, s) / "vllm-c512" / f"seed-{seed}" / "run.json").write_text("{}")
    todo = tl.pending_runs(tmp_path, "vllm-c512", cells, [1, 2], 40.0)
    assert [d.parent.name for _, d in todo] == [tl.cell(r, s) for r, s in cells]    # a new study: per cell
    (tmp_path / "calibration" / "vllm-c512" / "seed-0").mkdir(parents=True)
    (tmp_path / "calibration" / "vllm-c512" / "seed-0" / "run.json").write_text("{}")
    assert tl.pending_runs(tmp_path, "vllm-c512", cells, [1, 2], 40.0) == []


def test_report_only_starts_no_engine_and_names_what_is_missing(tmp_path: Path, fake: list[tuple[str, ...]],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--report-only`` rebuilds a report from the records alone: with a probe or run missing it says which
    and exits non-zero without starting an engine; a folder whose cells are not known is refused as well."""
    assert ts.main(["--out", str(tmp_path), "--report-only"]) != 0
    assert "cells are not known" in capsys.readouterr().err
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9]]}))
    tl.run_engines(tmp_path, [1, 2, 3], tl.RUN_S, ts.study_cells(tmp_path, quick=False, rate=None))
    fake.clear()
    run = tmp_path / "live" / "rate0.6-sigma0.9" / "sglang-lpm" / "seed-2" / "run.json"
    run.unlink()
    assert ts.main(["--out", str(tmp_path), "--report-only"]) != 0
    err = capsys.readouterr().err
    assert "1 probe or run record(s) missing (live/rate0.6-sigma0.9/sglang-lpm/seed-2)" in err
    assert "--report-only" in err and fake == []                 # nothing started
    assert tl.unrecorded(tmp_path, [1, 2, 3], tl.RUN_S, [(0.6, 0.9)]) == [run.parent]


def test_vllm_instances_log_their_iterations_when_asked(tmp_path: Path, fake: list[tuple[str, ...]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--vllm-step-log``: every instance is asked for it, and a vLLM instance then runs with
    --enable-logging-iteration-details and its step log beside its log; without it, no vLLM step log.
    SGLang's scheduler step log is on either way."""
    import argparse

    from calibrate.twin.args import add_arguments
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert ap.parse_args(["--vllm-step-log"]).vllm_step_log and not ap.parse_args([]).vllm_step_log
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9]]}))
    tl.run_engines(tmp_path, [1], 45.0, ts.study_cells(tmp_path, quick=False, rate=None), vllm_steps=True)
    assert [e[1] for e in fake if e[0] == "vllm steps"] == list(tl.ORDER)
    monkeypatch.undo()                                      # the real engine(), on a stand-in model folder
    monkeypatch.setattr(tl, "tiny_model", lambda path: tmp_path / "model")
    log = tmp_path / "logs" / "vllm-c512.log"
    on = tl.engine("vllm", tl.CONFIGS["vllm-c512"][1], log, vllm_steps=True)
    assert on.step_log == tmp_path / "logs" / "vllm-c512.steps" and "--enable-logging-iteration-details" in on.argv()
    off = tl.engine("vllm", tl.CONFIGS["vllm-c512"][1], log)
    assert off.step_log is None and "--enable-logging-iteration-details" not in off.argv()
    sgl = tl.engine("sglang", tl.CONFIGS["sglang-lpm"][1], tmp_path / "logs" / "sglang-lpm.log")
    assert sgl.step_log == tmp_path / "logs" / "sglang-lpm.steps"


def running(events: list[tuple[str, ...]]) -> list[tuple[tuple[str, ...], set[str]]]:
    """Each run with the instances that were started and neither paused nor stopped while it ran."""
    up: set[str] = set()
    got = []
    for e in events:
        if e[0] in ("start", "resume"):
            up.add(e[1])
        elif e[0] in ("pause", "stop"):
            up.discard(e[1])
        elif e[0] == "run":
            got.append((e, set(up)))
    return got


def test_an_interleaved_study_holds_every_instance_and_serves_the_runs_slot_by_slot(
        tmp_path: Path, fake: list[tuple[str, ...]]) -> None:
    """--interleave: each instance is started once, in ORDER, serves its probes and calibration traces and is
    paused; then each slot (a cell's seed) runs on every configuration, the order rotated from slot to slot,
    with only the serving instance running; every instance is stopped at the end."""
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9], [1.1, 0.9]]}))
    tl.run_interleaved(tmp_path, [1, 2], 45.0, ts.study_cells(tmp_path, quick=False, rate=None))
    starts = [e[1] for e in fake if e[0] == "start"]
    assert starts == list(tl.ORDER)
    first_study_run = next(i for i, e in enumerate(fake) if e[0] == "run" and e[3].startswith("live/"))
    assert all(e[0] != "start" for e in fake[first_study_run:])          # every instance held from the start
    calibration = [e for e in fake[:first_study_run] if e[0] == "run"]
    assert [e[1] for e in calibration] == [label for label in tl.ORDER for _ in range(2)]
    study = [e for e in fake if e[0] == "run" and e[3].startswith("live/")]
    slots = [(cell, seed) for cell in ("rate0.6-sigma0.9", "rate1.1-sigma0.9") for seed in ("seed-1", "seed-2")]
    assert [(e[3].split("/")[1], e[2]) for e in study] == [s for s in slots for _ in tl.ORDER]
    assert [e[1] for e in study] == [label for k in range(4) for label in tl.ORDER[k:] + tl.ORDER[:k]]
    for e, up in running(fake):
        assert up == {e[1]}                       # the serving instance alone runs: every other one is paused
    assert sorted(e[1] for e in fake if e[0] == "stop") == sorted(tl.ORDER)
    assert fake[-len(tl.ORDER):] == [("stop", label) for label in tl.ORDER]
    fake.clear()
    tl.run_interleaved(tmp_path, [1, 2], 45.0, ts.study_cells(tmp_path, quick=False, rate=None))
    assert fake == []                                       # everything recorded: no engine is started


def test_calibration_slots_serve_each_cells_calibration_traces_just_before_its_study_slots(
        tmp_path: Path, fake: list[tuple[str, ...]]) -> None:
    """--interleave --calibration-slots: each instance serves its probes and warm-up before it is paused, and
    its calibration trace of a cell in a slot of its own, on every configuration, just before that cell's
    study slots; the rotation runs over every slot."""
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9], [1.1, 0.9]]}))
    tl.run_interleaved(tmp_path, [1, 2], 45.0, ts.study_cells(tmp_path, quick=False, rate=None), warm_up=30.0,
                       calibration_slots=True)
    runs = [e for e in fake if e[0] == "run"]
    first_slot = next(i for i, e in enumerate(runs) if not e[3].startswith("warm-up/"))
    assert all(e[3].startswith("warm-up/") for e in runs[:first_slot])
    assert [e[1] for e in runs[:first_slot]] == [label for label in tl.ORDER for _ in range(2)]
    assert all(e[0] != "start" for e in fake[fake.index(runs[first_slot]):])
    served = [(e[3].split("/")[0], e[3].split("/")[1 if e[3].startswith("live/") else 2], e[2])
              for e in runs[first_slot:]]
    slots = [(what, c, seed) for c in ("rate0.6-sigma0.9", "rate1.1-sigma0.9")
             for what, seed in (("calibration", "seed-0"), ("live", "seed-1"), ("live", "seed-2"))]
    assert served == [s for s in slots for _ in tl.ORDER]
    assert [e[1] for e in runs[first_slot:]] == [label for k in range(6) for label in tl.ORDER[k:] + tl.ORDER[:k]]
    assert {e[4] for e in runs[first_slot:] if e[3].startswith("calibration/")} == {tl.CALIBRATION_S / 2}
    for e, up in running(fake):
        assert up == {e[1]}
    fake.clear()
    tl.run_interleaved(tmp_path, [1, 2], 45.0, ts.study_cells(tmp_path, quick=False, rate=None), warm_up=30.0,
                       calibration_slots=True)
    assert fake == []


def test_calibration_slots_need_an_interleaved_study(tmp_path: Path) -> None:
    """--calibration-slots without --interleave is refused with one line saying why."""
    from calibrate.twin.study import main
    with pytest.raises(SystemExit) as err:
        main(["--out", str(tmp_path), "--calibration-slots", "--report-only"])
    assert err.value.code == 2


def test_an_interleaved_study_interrupted_stops_every_instance_and_resumes_what_is_left(
        tmp_path: Path, fake: list[tuple[str, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the middle of the study runs: every held instance is stopped, what was recorded stays, and
    the study resumed serves only the runs left, on fresh instances of the configurations that have them."""
    (tmp_path / "conditions.json").write_text(json.dumps({"knee": 1.0, "conditions": [[0.6, 0.9]]}))
    cells = ts.study_cells(tmp_path, quick=False, rate=None)
    faked_run = tl.run_live
    served: list[Path] = []

    def interrupted(trace: Any, cfg: Any, opts: Any, dest: Path) -> Any:
        if dest.parts[-4] == "live":
            if len(served) == 2:
                raise KeyboardInterrupt
            served.append(dest)
        return faked_run(trace, cfg, opts, dest)
    monkeypatch.setattr(tl, "run_live", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tl.run_interleaved(tmp_path, [1], 45.0, cells)
    assert sorted(e[1] for e in fake if e[0] == "stop") == sorted(tl.ORDER)
    left = [label for label in tl.ORDER if not (tmp_path / "live" / "rate0.6-sigma0.9" / label / "seed-1"
                                                / "run.json").is_file()]
    assert len(left) == 3
    fake.clear()
    monkeypatch.setattr(tl, "run_live", faked_run)
    tl.run_interleaved(tmp_path, [1], 45.0, cells)
    assert [e[1] for e in fake if e[0] == "start"] == left
    assert [e[3] for e in fake if e[0] == "run"] == [f"live/rate0.6-sigma0.9/{label}/seed-1" for label in left]


def test_the_report_says_how_the_runs_were_served() -> None:
    """One instance after another unless two configurations' runs overlap in time."""
    from calibrate.twin.tables import serving_order

    def meta(label: str, start: float) -> dict[str, Any]:
        return {"engine": label, "run_window": {"start_unix": start}}
    serial = [meta("a", 0.0), meta("a", 50.0), meta("b", 100.0), meta("b", 150.0), {"engine": "c"}]
    assert serving_order(serial).startswith("one instance at a time")
    interleaved = [meta("a", 0.0), meta("b", 50.0), meta("a", 100.0), meta("b", 150.0)]
    assert serving_order(interleaved).startswith("interleaved")
    assert serving_order(interleaved, [-60.0, -30.0]).endswith("every calibration trace before the first slot)")
    assert serving_order(interleaved, [-60.0, 75.0]).endswith("a slot of their own before its study slots)")



def test_the_study_s_design_is_data(tmp_path: Path):
    """The study's configurations, order, pairs, seeds, cells, calibration and probe plan come from
    scenarios/grids/twin-cpu.yaml; its traces are the design's scenario with the cell filled in, and a broken
    design is refused in one line naming the field."""
    import yaml

    from calibrate.twin.design import DESIGN, load_design
    from calibrate.twin.live import CONFIGS, ORDER, PROBED, scenario
    d = load_design()
    assert list(CONFIGS) == list(d.configurations) and d.order == ORDER and set(PROBED) == set(d.probes)
    assert CONFIGS["vllm-c512"] == ("vllm", {"enable_chunked_prefill": True, "max_num_batched_tokens": 512})
    assert scenario(0.4, 0.9, 40.0, 2) == {
        "name": "rate0.4-sigma0.9", "seed": 2, "duration_s": 40.0,
        "arrivals": {"kind": "gamma", "rate": 0.4, "cv": 1.5},
        "prompts": {"length": 2048, "sharing": 0.9, "vocab_low": 2, "vocab_high": 4096},
        "outputs": {"planner": 32, "worker": 32, "aggregator": 64},
        "tools": {"mcp": {"kind": "lognormal", "median_s": 0.3, "p95_s": 1.5, "max_s": 10}}}
    assert PROBED["sglang-lpm"][1].batched == ((1843, 205, 2), (1843, 205, 4), (1843, 205, 8))
    data = yaml.safe_load(DESIGN.read_text())
    data["order"] = [*data["order"], "vllm-c1024"]
    bad = tmp_path / "twin.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="configurations named but not defined: \\['vllm-c1024'\\]") as err:
        load_design(bad)
    assert "\n" not in str(err.value)
