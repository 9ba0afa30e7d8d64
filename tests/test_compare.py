"""Probe fitting recovers known coefficients; compare on identical inputs reports zero error."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.records import RunRecord, write_run
from calibrate.compare import compare
from calibrate.fit import with_params
from calibrate.probe_fit import fit_probes
from calibrate.probes import ProbePlan, ProbeRow
from simulator import simulate
from simulator.cost_model import BatchShape, CostModel
from simulator.profiles import load_hardware, load_model

TRUE = {"eta_compute": 0.2, "eta_bandwidth": 0.1, "kappa_kv": 0.3, "step_graph_s": 0.0005, "step_eager_s": 0.008,
        "per_seq_s": 2e-5}


def synthetic_probes(path: Path, noise: float, seed: int, disturbed: float = 1.0, true: dict | None = None,
                     budget: int | None = None) -> None:
    """A probe record whose times come from the cost model with known coefficients (+ noise); the second
    of three repeats of every decode probe is ``disturbed`` times slower (a starved API process). With a
    chunk ``budget`` the engine prefills a prompt in steps of at most that many tokens; a lone request's
    TTFT is the front end's latency (``request_s``) plus its prefill steps."""
    hw = with_params(load_hardware("cpu-base"), "vllm-v1", true or TRUE)
    cm = CostModel(hw, load_model("tiny-llama"), "vllm-v1")
    rng = np.random.default_rng(seed)
    plan, rows, probes = ProbePlan(), [], []
    rid = 0

    def prefill_time(n: int, ctx: int) -> float:
        done, t = 0, cm.request_latency
        while done < n:
            k = min(budget or n, n - done)
            b = BatchShape()
            b.add_prefill(k, ctx + done, done + k >= n)
            t += cm.step_time(b)
            done += k
        return t

    def add(kind: str, n: int, ctx: int, c: int, shape: BatchShape, tokens: int, rep: int = 0) -> None:
        nonlocal rid
        base = cm.step_time(shape) if kind == "decode" else prefill_time(n, ctx)
        step = base * (1 + rng.normal(0, noise)) * (disturbed if kind == "decode" and rep == 1 else 1)
        first = 0.01 + (step if kind != "decode" else 0.05 * c)     # decode: the c prompts' prefill first
        last = first + (tokens - 1) * step if kind == "decode" else first
        rows.append({"request_id": rid, "dag_id": rid, "role": "probe", "planned_s": 0.0, "send_s": 0.01,
                     "first_token_s": first, "last_token_s": last, "output_tokens": tokens, "prompt_tokens": n + ctx,
                     "cached_tokens": np.nan, "ok": True, "error": ""})
        probes.append(dataclasses.asdict(ProbeRow(rid, kind, n, ctx, c, rep, tokens)))
        rid += 1
    for rep in range(3):
        for n in plan.prefill_lengths:
            b = BatchShape()
            b.add_prefill(n, 0, True)
            add("prefill", n, 0, 1, b, 1)
        for L, d in plan.cached:
            b = BatchShape()
            b.add_prefill(d, L, True)
            add("cached", d, L, 1, b, 1)
        for prompt in plan.decode_contexts:             # two output lengths: the estimator differences them
            ctx = prompt + (16 + 64) // 2
            for c in plan.decode_batches:
                b = BatchShape()
                for _ in range(c):
                    b.add_decode(ctx)
                for out in (16, 64):
                    for _ in range(c):
                        add("decode", 1, ctx, c, b, out, rep)
    meta = {"run_id": "p", "source": "probe", "trace_digest": "", "scenario": {}, "seed": 0, "engine": "probe",
            "engine_config": {"block_size": 32, "enable_chunked_prefill": budget is not None,
                              "max_num_batched_tokens": budget or 8192},
            "hardware": "live", "model": "tiny-llama", "offered_load_rps": 0.0,
            "run_window": {"duration_s": 1.0}, "exclusion": {}, "telemetry_summary": {}, "versions": {},
            "probes": probes}
    write_run(RunRecord(meta=meta, requests=pd.DataFrame(rows)), path)


def _held_out_shapes() -> list[BatchShape]:
    out = []
    for c, ctx in ((12, 1000), (3, 3000), (24, 600)):
        b = BatchShape()
        for _ in range(c):
            b.add_decode(ctx)
        out.append(b)
    b = BatchShape()
    b.add_prefill(3000, 0, True)
    out.append(b)
    b = BatchShape()
    b.add_prefill(300, 1500, True)
    out.append(b)
    return out


def test_probe_fit_recovers_known_coefficients(tmp_path: Path):
    synthetic_probes(tmp_path / "p", noise=0.02, seed=1)
    res, obs = fit_probes([tmp_path / "p"], "vllm-v1", "tiny-llama", "cpu-base", tmp_path / "fitted.yaml")
    assert res.r2 > 0.98 and res.mape < 0.05
    # Identifiable from these probes: the compute slope and the KV-read slope (κ_kv / η_b). With a tiny
    # model the weight read is a constant per step, confounded with the step overheads; what matters is
    # that step times of shapes never probed come out right.
    assert res.params["eta_compute"] == pytest.approx(TRUE["eta_compute"], rel=0.2)
    assert res.params["kappa_kv"] / res.params["eta_bandwidth"] == pytest.approx(
        TRUE["kappa_kv"] / TRUE["eta_bandwidth"], rel=0.2)
    true_cm = CostModel(with_params(load_hardware("cpu-base"), "vllm-v1", TRUE), load_model("tiny-llama"), "vllm-v1")
    fit_cm = CostModel(with_params(load_hardware("cpu-base"), "vllm-v1", res.params), load_model("tiny-llama"),
                       "vllm-v1")
    for shape in _held_out_shapes():
        assert fit_cm.step_time(shape) == pytest.approx(true_cm.step_time(shape), rel=0.08)
    hw = load_hardware(str(tmp_path / "fitted.yaml"))
    assert hw.eta_compute == pytest.approx(res.params["eta_compute"], rel=1e-4)


def test_probe_fit_separates_the_front_ends_request_latency_from_step_costs(tmp_path: Path):
    """An engine with a per-request front-end latency (6 ms) and no fixed prefill-step cost, probed with
    and without a 512-token chunk budget: its chunked prefills (one step per chunk) are what tell the two
    apart. The fit recovers the latency, and a chunked prompt costs what the engine says, not one step
    overhead per chunk more."""
    true = {**TRUE, "step_eager_s": 0.0, "request_s": 0.006}
    synthetic_probes(tmp_path / "whole", noise=0.01, seed=3, true=true)
    synthetic_probes(tmp_path / "c512", noise=0.01, seed=4, true=true, budget=512)
    res, obs = fit_probes([tmp_path / "whole", tmp_path / "c512"], "vllm-v1", "tiny-llama", "cpu-base",
                          tmp_path / "fitted.yaml")
    assert res.mape < 0.03
    assert res.params["request_s"] == pytest.approx(0.006, abs=0.0015)
    assert res.params["step_eager_s"] < 0.0015
    chunked = [o for o, _, k in obs if k == "prefill" and len(o.steps) == 4]          # 2,048 tokens: 4 chunks
    assert [b.prefill_ctx for _, b in chunked[0].steps] == [0, 512, 1024, 1536]
    assert load_hardware(str(tmp_path / "fitted.yaml")).overhead("vllm-v1").request_s == pytest.approx(
        res.params["request_s"], abs=1e-6)


def test_compare_on_identical_inputs_reports_zero_error(tmp_path: Path, small_trace):
    for eng, over in (("vllm-v1", {}), ("vllm-0.6.3", {"enable_prefix_caching": True})):
        rec = simulate(small_trace, eng, "l4", "llama-3.1-8b", over)
        rec.meta["source"] = "live"                 # pretend a live engine produced exactly this
        rec.meta["engine"] = f"{eng}-as-live"
        write_run(rec, tmp_path / "live" / eng / "seed-1")     # same leaf name in both configurations
    from analysis.records import find_runs, read_run
    lives = [read_run(p) for p in find_runs([tmp_path / "live"])]
    tables = compare(lives, tmp_path / "sim", "l4", "llama-3.1-8b",
                     ("vllm-v1-as-live/vllm-0.6.3-as-live", "vllm-0.6.3-as-live/vllm-v1-as-live"))
    sbs = tables["side_by_side"]
    errs = sbs["rel_error"].dropna()
    assert len(errs) >= 10 and (errs.abs() < 1e-9).all()
    g = tables["gaps"]
    assert not g.empty and np.allclose(g["measured_gap"], g["simulated_gap"])
    d = tables["decomposition"]
    assert np.allclose(d["measured_phi"].fillna(0), d["simulated_phi"].fillna(0))
    twins = sorted(p.parent.parent.name for p in (tmp_path / "sim").rglob("run.json"))
    assert twins == ["vllm-0.6.3-as-live", "vllm-v1-as-live"]      # each twin kept, none overwritten


def test_twin_takes_the_live_runs_resolved_settings():
    from calibrate.translate import translate
    tr = translate({"version": "0.5.23", "schedule_policy": "lpm", "chunked_prefill_size": 512,
                    "max_total_tokens": 65536, "attention_backend": "torch_native", "disable_radix_cache": False})
    assert (tr.engine, tr.preset) == ("sglang", "sglang-current")
    assert tr.overrides == {"schedule_policy": "lpm", "chunked_prefill_size": 512, "max_total_tokens": 65536,
                            "attention_backend": "torch_native", "disable_radix_cache": False}
    tr = translate({"version": "0.32.0", "block_size": 32, "enable_prefix_caching": True,
                    "max_num_batched_tokens": 8192})
    assert tr.preset == "vllm-v1" and tr.overrides == {"block_size": 32, "enable_prefix_caching": True,
                                                       "max_num_batched_tokens": 8192}
    assert translate({"engine": "vllm", "version": "0.6.3.post1"}).preset == "vllm-0.6.3"
    assert translate({"engine": "sglang", "version": "0.4.1"}).preset == "sglang-0.4.1"
    assert translate({"engine": "sglang", "version": "0.4.3.post2"}).preset == "sglang-current"


@pytest.mark.parametrize(("cfg", "words"), [
    ({"max_model_len": 8192}, "cannot tell which engine"),
    ({"engine": "vllm", "block_size": 16}, "has no version"),
    ({"engine": "sglang", "version": "0.3.6"}, "before 0.4"),
    ({"engine": "vllm", "version": "0.6.3", "num_scheduler_steps": 8}, "multi-step scheduling"),
    ({"engine": "vllm", "version": "0.6.3", "arg.scheduling_policy": "lifo"}, "vLLM's are fcfs, priority"),
    ({"engine": "sglang", "version": "0.4.1", "schedule_policy": "random"}, "the simulator models lpm"),
    ({"engine": "sglang", "version": "0.4.1", "speculative_algorithm": "EAGLE"}, "speculative decoding"),
    ({"engine": "sglang", "version": "0.4.1", "tp_size": 2}, "one GPU per engine"),
])
def test_a_configuration_it_cannot_reproduce_is_refused_not_guessed(cfg: dict, words: str):
    from calibrate.translate import Untranslatable, translate
    with pytest.raises(Untranslatable, match=words) as err:
        translate(cfg, "runs/x")
    assert str(err.value).startswith("runs/x: ") and err.value.exit_code == 2


def test_the_captured_configuration_names_its_engine():
    from live.config_capture import parse_log
    vllm = parse_log("INFO 12-05 Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
                     "enable_prefix_caching=True, dtype=torch.bfloat16\n")
    sglang = parse_log("[2026-12-05] server_args=ServerArgs(model_path='m', schedule_policy='lpm', "
                       "chunked_prefill_size=512)\n")
    assert (vllm["engine"], vllm["version"]) == ("vllm", "0.32.0") and sglang["engine"] == "sglang"


def test_twin_study_keeps_pace_table():
    from calibrate.twin.tables import keeps_pace_table
    sbs = pd.DataFrame({"config": ["a", "a", "b", "b"], "seed": [1, 2, 1, 2], "metric": ["pace_realised"] * 4,
                        "measured": [0.99, 0.90, 1.0, 1.0], "simulated": [0.98, 0.98, 0.5, 1.0]})
    t = keeps_pace_table(sbs).set_index("config")
    assert t.loc["a", "measured_keeps"] == 0.5 and t.loc["a", "simulated_keeps"] == 1.0
    assert t.loc["b", "simulated_pace"] == pytest.approx(0.75) and t.loc["b", "seeds"] == 2


def test_twin_study_target_checks():
    from calibrate.twin.targets import target_checks
    gaps = pd.DataFrame([
        {"pair": "vllm-nochunk/sglang-lpm", "metric": "ttft_p50", "measured_gap": 0.2, "simulated_gap": 0.22,
         "measured_lo": 0.15, "measured_hi": 0.3},
        {"pair": "vllm-c512/sglang-lpm-c512", "metric": "ttft_p50", "measured_gap": 0.2, "simulated_gap": 1.3,
         "measured_lo": 0.1, "measured_hi": 0.4}])
    phi = pd.DataFrame([{"metric": "ttft_p50", "measured_phi": 0.1, "simulated_phi": 0.3},
                        {"metric": "ttft_p95", "measured_phi": 0.2, "simulated_phi": math.nan},
                        {"metric": "throughput", "measured_phi": math.nan, "simulated_phi": 0.4}])
    per = pd.DataFrame([{"config": "vllm-c512", "metric": "e2e_p50", "measured": 1.0, "simulated": 1.1,
                         "rel_error": 0.1}])
    t = target_checks("c", gaps, phi, per).set_index(["target", "what"])
    assert t.loc[("gap ttft_p50", "defaults"), "met"]                        # +10 %, same side
    assert t.loc[("gap ttft_p50", "defaults"), "in_measured_ci"]             # 0.22 inside [0.15, 0.3]
    assert not t.loc[("gap ttft_p50", "matched"), "in_measured_ci"]
    assert not t.loc[("gap ttft_p50", "matched"), "same_side"]               # 0.2 vs 1.3: opposite sides
    assert not t.loc[("phi ttft_p50", "defaults vs matched"), "met"]         # off by 0.2 > 0.15
    assert not t.loc[("phi ttft_p95", "defaults vs matched"), "met"]         # the twin's gap does not decompose
    assert ("phi throughput", "defaults vs matched") not in t.index          # the engines' gap does not
    assert t.loc[("engine e2e_p50", "vllm-c512"), "met"]
    assert pd.isna(t.loc[("phi ttft_p50", "defaults vs matched"), "in_measured_ci"])   # no interval given


def test_a_phi_check_says_whether_the_twin_lies_inside_the_measured_phis_interval():
    """φ from a side-by-side table of three seeds: the measured φ's interval comes from the per-seed gaps
    of both pairs, and the check says whether the simulated φ lies inside it."""
    from calibrate.twin.targets import study_tables, target_checks
    rows = []
    for seed, (nochunk, c512) in enumerate([(2.0, 1.2), (2.3, 1.25), (1.8, 1.1)], start=1):
        for cfg, meas, sim in (("vllm-nochunk", nochunk, 2.0), ("sglang-lpm", 1.0, 1.0),
                               ("vllm-c512", c512, 1.9), ("sglang-lpm-c512", 1.0, 1.0)):
            rows.append({"config": cfg, "seed": seed, "metric": "ttft_p50", "measured": meas, "simulated": sim,
                         "rel_error": sim / meas - 1})
    gaps, phi, per = study_tables(pd.DataFrame(rows))
    r = phi.set_index("metric").loc["ttft_p50"]
    assert r["measured_phi_lo"] < r["measured_phi"] < r["measured_phi_hi"] < 1
    t = target_checks("c", gaps, phi, per).set_index(["target", "what"])
    assert not t.loc[("phi ttft_p50", "defaults vs matched"), "in_measured_ci"]   # the twin removes ~7 %
    assert not t.loc[("phi ttft_p50", "defaults vs matched"), "met"]


def test_a_cells_per_engine_error_is_that_of_its_mean_over_seeds():
    """A per-engine target is checked on the cell's value (the mean over its seeds), as the report shows
    it: one seed's twin 34 % fast and two 13–19 % slow do not cancel into a met check."""
    from calibrate.twin.targets import per_config_means
    live, twin = [1.59, 5.70, 1.38], [1.79, 3.75, 1.64]     # one study: SGLang LPM 512, λ = 0.66, E2E p50 by seed
    pairs = enumerate(zip(live, twin, strict=True))
    sbs = pd.DataFrame([{"config": "sglang-lpm-c512", "seed": k + 1, "metric": "e2e_p50", "measured": a,
                         "simulated": b, "rel_error": (b - a) / a} for k, (a, b) in pairs])
    assert abs(sbs["rel_error"].mean()) < 0.01                               # the old statistic: "met"
    row = per_config_means(sbs).iloc[0]
    assert row["rel_error"] == pytest.approx(sum(twin) / sum(live) - 1) and row["rel_error"] < -0.15
    assert row["seeds"] == 3 and row["seeds_within"] == 1


def test_a_gap_at_parity_is_a_side_of_its_own():
    """Throughput gaps are exactly 1 where both engines complete every request of the window: a twin
    that says so agrees, one that puts either engine ahead does not."""
    from calibrate.twin.targets import same_side
    assert same_side(1.0, 1.0) and same_side(0.9, 0.95) and same_side(1.2, 1.01)
    assert not same_side(1.0, 1.01) and not same_side(0.99, 1.0) and not same_side(0.9, 1.1)


def _fake_study(root: Path, decode_scale: float = 1.0, duration: float = 15.0, drift: float | None = None,
                second_calibration: float | None = None, calibrated_apart: dict[str, float] | None = None) -> None:
    """A study folder whose "live" runs are simulations with the cpu-base profiles (their decode steps
    scaled by ``decode_scale``; the study seeds' by ``drift`` where given, as an instance that slows after
    its calibration): calibration traces (seed 0) and seeds 1–2 of one cell, every configuration (and, with
    ``second_calibration``, a calibration trace of a second cell, σ = 0.5, its decode steps scaled so and
    served first; with ``calibrated_apart``, the calibration traces of the configurations it names scaled
    by its value instead); ``profiles/`` holds the unscaled profiles the report fits against."""
    import shutil

    import yaml

    from calibrate.twin.live import CONFIGS, calibration_dir, scenario
    from scenarios import compile_trace, scenario_from_dict
    (root / "profiles").mkdir(parents=True)
    base = load_hardware("cpu-base").path
    for fam in ("vllm", "sglang"):
        shutil.copy(base, root / "profiles" / f"cpu-{fam}.yaml")

    def served(name: str, scale: float) -> Path:
        doc = yaml.safe_load(Path(base).read_text())
        for ovh in doc["cost"]["overheads"].values():
            ovh["decode_scale"] = {"value": scale, "basis": "assumed", "source": "test"}
        dest = root / f"served-{name}.yaml"
        dest.write_text(yaml.safe_dump(doc, sort_keys=False))
        return dest
    # (scale, sharing, seed, when served, where): seed 0 is each instance's calibration trace
    runs = [(decode_scale if seed == 0 or drift is None else drift, 0.9, seed, 100.0 * seed,
             lambda label, seed=seed: calibration_dir(root, label, "rate0.4-sigma0.9") if seed == 0 else
             root / "live" / "rate0.4-sigma0.9" / label / f"seed-{seed}") for seed in (0, 1, 2)]
    if second_calibration is not None:
        runs.insert(0, (second_calibration, 0.5, 0, -100.0,
                        lambda label: calibration_dir(root, label, "rate0.4-sigma0.5")))
    for scale, sharing, seed, when, where in runs:
        shared = served(f"{sharing:g}-{seed}", scale)
        trace = compile_trace(scenario_from_dict(scenario(0.4, sharing, duration, seed)))
        for i, (label, (kind, opts)) in enumerate(CONFIGS.items()):
            apart = (calibrated_apart or {}).get(label) if seed == 0 else None
            profile = served(f"{sharing:g}-{seed}-{label}", apart) if apart is not None else shared
            if kind == "vllm":
                over = {"block_size": 32, **opts}          # the study's knobs are the simulator's names
                rec = simulate(trace, "vllm-v1", str(profile), "tiny-llama", over, context=8192, record_tokens=True)
            else:
                over = {"max_total_tokens": 65536, **opts}
                rec = simulate(trace, "sglang-current", str(profile), "tiny-llama", over, context=8192,
                               record_tokens=True)
            rec.meta.update({"source": "live", "engine": label})
            rec.meta["run_window"]["start_unix"] = 1.8e9 + when + 10.0 * i    # seed by seed, as --interleave
            rec.meta["host"] = {"cpu": {"model_name": "Example Xeon", "isa": ["avx2", "avx512f"]}} if seed == 2 else {}
            write_run(rec, where(label))


def _e2e_error(out: Path, config: str) -> float:
    """The held-out twin's E2E p50 error of one configuration, as the study's targets.csv has it."""
    t = pd.read_csv(out / "targets.csv")
    return float(t[(t["target"] == "engine e2e_p50") & (t["what"] == config)]["error"].iloc[0])


def test_engine_pooled_twin_scales_every_instance_of_an_engine_by_all_their_calibration_traces(tmp_path: Path):
    """vLLM 512's instance calibrates 1.5× slower than the others, whose runs and traces are all at the
    profile: its held-out profile carries 1.5 and vLLM unchunked's 1.0, while both engine-pooled profiles
    carry one scale — the two instances' traces pooled, weighted by their decode gaps — naming its source;
    SGLang's stay at 1.0, and the report counts the engine-pooled twin's checks."""
    import yaml

    from calibrate.twin.study import INSTANCE_COLUMN, POOLED_COLUMN, calibrate_instances, summarise
    from foundation.errors import ServetwinError
    _fake_study(tmp_path, calibrated_apart={"vllm-c512": 1.5})
    cal = calibrate_instances(tmp_path)
    table = cal.scales.set_index("config")

    def scale(path: Path) -> dict:
        return yaml.safe_load(path.read_text())["cost"]["overheads"]["vllm-v1"]["decode_scale"]
    assert scale(cal.profiles["vllm-c512"])["value"] == pytest.approx(1.5, abs=0.03)
    assert scale(cal.profiles["vllm-nochunk"])["value"] == pytest.approx(1.0, abs=0.03)
    gaps, got = table.loc[["vllm-c512", "vllm-nochunk"], "decode_gaps"], table.loc[["vllm-c512", "vllm-nochunk"],
                                                                                   "decode_scale"]
    want = math.exp(float((gaps * got.map(math.log)).sum() / gaps.sum()))
    pooled = [scale(cal.pooled[label]) for label in ("vllm-c512", "vllm-nochunk")]
    assert pooled[0] == pooled[1] and pooled[0]["value"] == pytest.approx(want, abs=0.002)
    assert 1.05 < pooled[0]["value"] < 1.45 and "every vllm instance" in pooled[0]["source"]
    sg = yaml.safe_load(cal.pooled["sglang-lpm"].read_text())["cost"]["overheads"]["sglang"]["decode_scale"]
    assert sg["value"] == pytest.approx(1.0, abs=0.03)
    head = summarise(tmp_path, [(0.4, 0.9)], calibration="instance").split("\n\n|")[1]
    assert POOLED_COLUMN in head and INSTANCE_COLUMN not in head
    own = _e2e_error(tmp_path, "vllm-c512")
    # the engine's pooled traces as the held-out twin: the per-instance twin is then the column beside it, and
    # vLLM 512's held-out twin, scaled by the pool rather than by its own slow traces, is closer to its runs
    report = summarise(tmp_path, [(0.4, 0.9)], calibration="engine")
    title, head = report.split("## Targets (")[1].split("\n", 1)
    assert "of every instance of its engine measured, pooled" in title
    counts = head.split("\n\n")[0]
    assert INSTANCE_COLUMN in counts and POOLED_COLUMN not in counts
    assert 0 < _e2e_error(tmp_path, "vllm-c512") < own
    with pytest.raises(ServetwinError, match="calibration 'fleet' unknown; accepted: engine, instance"):
        summarise(tmp_path, [(0.4, 0.9)], calibration="fleet")


def test_twin_study_report_builds_and_meets_targets_on_identical_inputs(tmp_path: Path):
    """The study's report end to end at a small scale: "live" runs that are simulations with the same
    profiles, so every target must be met and every error be zero."""
    from calibrate.twin.study import CONFIGS, summarise
    _fake_study(tmp_path)
    report = summarise(tmp_path, [(0.4, 0.9)])
    first, rest = report.split("\n", 1)        # which CPUs measured: seed 2 names its CPU, seed 1 did not
    assert first == "Host CPU of the live runs: Example Xeon (avx2, avx512f): 5 runs; not recorded: 5 runs"
    served, rest = rest.lstrip().split("\n", 1)      # every configuration's seed 1 served before any seed 2
    assert served.startswith("Study runs served: interleaved (each instance paused while another served")
    assert rest.lstrip().startswith("## Targets") and "keeps pace" in report and "decomposition φ" in report
    section = report.split("## Decode scale")[1].split("\n## ")[0]
    scales = [line.split("|") for line in section.splitlines() if line.startswith("| ")]
    assert len(scales) == 1 + len(CONFIGS) and all(float(r[2]) == 1.0 for r in scales[1:])  # identical: 1
    assert all("1.00–1.00 (1.00, 2 runs)" in r[8] for r in scales[1:])      # each study run measured alike
    assert (tmp_path / "profiles" / "sglang-lpm.yaml").is_file()
    assert "rate0.4-sigma0.9: the client" in report and "| not recorded | — | — |" in report   # no lag recorded: say so
    rows = [line for line in report.splitlines() if line.startswith("| rate0.4-sigma0.9 |")]
    assert len(rows) >= 10 and all(line.rstrip(" |").endswith("True") for line in rows)
    assert (tmp_path / "figures" / "rate0.4-sigma0.9").is_dir()
    checks = pd.read_csv(tmp_path / "targets.csv")        # the held-out checks, as calibrate.twin.bias reads them
    assert len(checks) >= 10 and checks["met"].all() and set(checks["cell"]) == {"rate0.4-sigma0.9"}
    assert (checks["error"].abs() < 1e-12).all()


def test_an_instances_calibration_traces_are_pooled_into_its_profile(tmp_path: Path):
    """An instance that served calibration traces of two cells, one decoding 1.4× slower than the other:
    its profile's decode scale is their geometric mean weighted by each trace's decode gaps, its source
    says both were pooled, and the report shows each trace's scale in the order they were served."""
    import yaml

    from calibrate.twin.study import calibrate_instances, summarise
    _fake_study(tmp_path, second_calibration=1.4)
    report = summarise(tmp_path, [(0.4, 0.9)])
    cal = calibrate_instances(tmp_path)
    scales, runs = cal.scales, cal.runs
    for label in ("vllm-nochunk", "sglang-lpm-c512"):
        row = scales.set_index("config").loc[label]
        slow, plain = (float(t.split(" ")[0]) for t in row["by trace (served order)"].split(" / "))
        assert slow == pytest.approx(1.4, abs=0.02) and plain == pytest.approx(1.0, abs=0.02)   # σ = 0.5 first
        gaps = [int(t.split("(")[1].rstrip(")")) for t in row["by trace (served order)"].split(" / ")]
        want = math.exp((gaps[0] * math.log(slow) + gaps[1] * math.log(plain)) / sum(gaps))
        assert row["decode_scale"] == pytest.approx(want, abs=0.01) and row["decode_gaps"] == sum(gaps)
        fam = "vllm-v1" if label.startswith("vllm") else "sglang"
        got = yaml.safe_load((tmp_path / "profiles" / f"{label}.yaml").read_text())["cost"]["overheads"][fam]
        assert got["decode_scale"]["value"] == pytest.approx(want, abs=0.01)
        assert got["decode_scale"]["source"].startswith(f"2 calibration traces pooled (calibration/{label}/*/seed-0)")
        assert got["decode_scale"]["source"].endswith(f"over {sum(gaps)} gaps")
    first = [r for r in runs["tracking"] if r.path.name == "seed-1" and r.path.parent.name == "vllm-nochunk"][0]
    assert first.scale is not None and 1.05 < first.scale.scale < 1.35     # the tracking twin starts pooled
    assert all(r in report.split("## Decode scale")[1] for r in scales["by trace (served order)"])


def test_twin_study_reports_what_is_left_with_each_runs_own_decode_scale(tmp_path: Path):
    """An instance that decodes 1.6× slower in its study runs than in its calibration trace: the held-out
    twins (scaled by the calibration) miss per-engine E2E in every configuration, the diagnostic twins
    scaled by each run's own decode speed meet it, and the spread of those scales says 1.6."""
    import yaml

    from calibrate.twin.study import CROSS_COLUMN, OWN_SCALE_COLUMN, TRACKING_COLUMN, summarise
    _fake_study(tmp_path, drift=1.6)
    report = summarise(tmp_path, [(0.4, 0.9)])
    head = report.split("## Targets", 1)[1].split("\n\n")[1].splitlines()   # the targets table
    cols = [c.strip() for c in head[0].split("|")]
    e2e = [c.strip() for c in next(line for line in head if line.startswith("| engine e2e_p50 |")).split("|")]
    assert e2e[cols.index("met")] == "0" and e2e[cols.index(OWN_SCALE_COLUMN)] == "5"
    assert "1.60–1.60 (1.60, 2 runs)" in report.split("## Decode scale")[1]
    assert len(list((tmp_path / "sim-own-scale").rglob("run.json"))) == 10
    assert len(list((tmp_path / "profiles" / "own-scale").rglob("seed-*.yaml"))) == 10
    # the tracking twin: seed 1, served first, keeps the calibration's 1.0; seed 2 gets what seed 1 measured
    assert TRACKING_COLUMN in cols and len(list((tmp_path / "sim-tracking").rglob("run.json"))) == 10
    for label in ("vllm-c512", "sglang-lpm"):
        first, second = (yaml.safe_load((tmp_path / "profiles" / "tracking" / "rate0.4-sigma0.9" / label /
                                         f"seed-{s}.yaml").read_text()) for s in (1, 2))
        fam = "vllm-v1" if label.startswith("vllm") else "sglang"
        assert first["cost"]["overheads"][fam]["decode_scale"]["value"] == 1.0
        assert first["cost"]["overheads"][fam]["decode_scale"]["source"].startswith(
            f"calibration/{label}/rate0.4-sigma0.9/seed-0:")
        seed1 = yaml.safe_load((tmp_path / "profiles" / "own-scale" / "rate0.4-sigma0.9" / label /
                                "seed-1.yaml").read_text())["cost"]["overheads"][fam]["decode_scale"]["value"]
        assert second["cost"]["overheads"][fam]["decode_scale"]["value"] == seed1 > 1.4
        assert second["cost"]["overheads"][fam]["decode_scale"]["source"].startswith(
            f"live/rate0.4-sigma0.9/{label}/seed-1:")
    # the cross-validated twin: seed 2's scale pools the calibration (1.0) with seed 1's run (1.6), not its own
    assert CROSS_COLUMN in cols and len(list((tmp_path / "sim-other-seeds").rglob("run.json"))) == 10
    crossed = yaml.safe_load((tmp_path / "profiles" / "other-seeds" / "rate0.4-sigma0.9" / "sglang-lpm" /
                              "seed-2.yaml").read_text())["cost"]["overheads"]["sglang"]["decode_scale"]
    assert 1.05 < crossed["value"] < 1.55 and "seeds other than seed-2" in crossed["source"]


def test_cross_validated_twin_pools_the_calibration_and_the_other_seeds_runs(tmp_path: Path):
    """Each run's scales: the geometric mean, weighted by what each measured over, of the calibration
    trace's and those of the instance's runs of every other seed, in any cell — never its own seed's."""
    import math

    from calibrate.decode_load import DecodeScale
    from calibrate.twin.own_scale import RunScale, other_seeds
    from calibrate.twin.steplog import PrefillScale

    def run(where: str, scale: float | None, gaps: int, prefill: float) -> RunScale:
        rec = RunRecord(meta={}, requests=pd.DataFrame(), path=tmp_path / where)
        return RunScale(tmp_path / where, rec, tmp_path / "fit.yaml",
                        None if scale is None else DecodeScale(scale, gaps, pd.DataFrame()),
                        prefill=PrefillScale(prefill, gaps // 10, "sglang", "step log"))
    cal = run("calibration/seed-0", 1.0, 100, 1.0)
    runs = [run("a/seed-1", 2.0, 300, 1.2), run("b/seed-1", 4.0, 100, 1.2), run("a/seed-2", 1.5, 200, 1.1),
            run("b/seed-2", None, 0, 1.3)]
    got = {str(r.path.relative_to(tmp_path)): r for r in other_seeds(cal, runs)}
    seed1 = math.exp((100 * math.log(1.0) + 200 * math.log(1.5)) / 300)       # calibration + a/seed-2
    seed2 = math.exp((100 * math.log(1.0) + 300 * math.log(2.0) + 100 * math.log(4.0)) / 500)
    for where, want in (("a/seed-1", seed1), ("b/seed-1", seed1), ("a/seed-2", seed2), ("b/seed-2", seed2)):
        assert got[where].scale is not None and got[where].scale.scale == pytest.approx(want)
    assert got["a/seed-1"].scale.gaps == 300 and got["a/seed-2"].scale.gaps == 500
    pre = got["a/seed-2"].prefill
    assert pre is not None and pre.n == 10 + 30 + 10
    assert pre.scale == pytest.approx(math.exp((10 * math.log(1.0) + 30 * math.log(1.2) + 10 * math.log(1.2)) / 50))
    assert got["a/seed-2"].source == "calibration traces and the instance's runs of seeds other than seed-2"


def test_pooled_prefill_scale_says_how_much_it_was_measured_over():
    """Pooled prefill scales weigh each part by its count, and the basis ends with the pooled count, which
    scale_drift reads back as the scale's weight."""
    import re

    from calibrate.twin.own_scale import pooled_prefill
    from calibrate.twin.steplog import PrefillScale
    basis = "step log, forwards with prefill, Σ measured / Σ priced over {}"
    got = pooled_prefill([PrefillScale(1.0, 30, "sglang", basis.format(30)),
                          PrefillScale(2.0, 10, "sglang", basis.format(10))])
    assert got.n == 40 and got.scale == pytest.approx(2.0 ** 0.25)
    assert got.basis.startswith("2 runs pooled: ") and re.findall(r"over (\d+)", got.basis)[-1] == "40"


def test_tracking_twin_scales_each_run_by_the_run_its_instance_served_before(tmp_path: Path):
    """In the order the runs started (not their seeds' order), each carries its predecessor's scale, the
    first the calibration's; a run without a measurable scale passes the last measured one on."""
    from calibrate.decode_load import DecodeScale
    from calibrate.twin.own_scale import RunScale, tracking
    from foundation.errors import ServetwinError

    def run(name: str, start: float | None, scale: float | None) -> RunScale:
        meta = {"run_window": {"start_s": 0.0, **({"start_unix": start} if start is not None else {})}}
        rec = RunRecord(meta=meta, requests=pd.DataFrame(), path=tmp_path / name)
        return RunScale(tmp_path / name, rec, tmp_path / "fit.yaml",
                        None if scale is None else DecodeScale(scale, 100, pd.DataFrame()))
    cal = run("calibration", 0.0, 0.9)
    got = tracking(cal, [run("seed-3", 300.0, 1.3), run("seed-1", 100.0, 1.1), run("seed-2", 200.0, None),
                         run("seed-4", 400.0, 1.4)])
    assert [r.path.name for r in got] == ["seed-1", "seed-2", "seed-3", "seed-4"]
    assert [r.scale.scale for r in got if r.scale] == [0.9, 1.1, 1.1, 1.3]
    assert [r.source.name for r in got if r.source] == ["calibration", "seed-1", "seed-1", "seed-3"]
    with pytest.raises(ServetwinError, match="start_unix missing"):
        tracking(cal, [run("seed-1", None, 1.0)])


def test_twin_study_holds_a_repeat_of_its_live_runs_to_the_same_targets(tmp_path: Path):
    """A repeat study (the same traces served again) takes the simulator's place: an identical repeat
    meets every target with zero error; one whose instances decode 1.6× slower misses the per-engine E2E
    target, and errors say by how much, in the repeat's direction."""
    from calibrate.twin.study import summarise
    from calibrate.twin.targets import repeat_checks
    _fake_study(tmp_path / "study")
    _fake_study(tmp_path / "same")
    _fake_study(tmp_path / "slow", decode_scale=1.6)
    same = repeat_checks(tmp_path / "study", tmp_path / "same", "rate0.4-sigma0.9")
    assert len(same) >= 10 and same["met"].all() and (same["error"].abs() < 1e-12).all()
    slow = repeat_checks(tmp_path / "study", tmp_path / "slow", "rate0.4-sigma0.9")
    e2e = slow[slow["target"] == "engine e2e_p50"]
    assert len(e2e) == 5 and (e2e["error"] > 0.15).all() and not e2e["met"].any()
    report = summarise(tmp_path / "study", [(0.4, 0.9)], [tmp_path / "same", tmp_path / "slow"])
    head = report.split("## Targets", 1)[1].split("\n\n")[1].splitlines()   # the targets table
    assert "met by a repeat of the live runs (same)" in head[0] and "(slow)" in head[0]
    e2e_row = next(line for line in head if line.startswith("| engine e2e_p50 |")).split("|")
    assert e2e_row[-3].strip() == "5" and e2e_row[-2].strip() == "0"        # same: 5 of 5; slow: none
    assert "## The live runs against a repeat of themselves (slow" in report


def test_twin_study_refuses_a_repeat_of_other_traces(tmp_path: Path, capsys):
    from calibrate.twin.study import main
    from calibrate.twin.targets import repeat_checks
    from foundation.errors import ServetwinError
    from servetwin.cli import main as servetwin_main
    _fake_study(tmp_path / "study")
    _fake_study(tmp_path / "other", duration=20.0)          # same seeds, other traces
    with pytest.raises(ServetwinError, match="identical traces"):
        repeat_checks(tmp_path / "study", tmp_path / "other", "rate0.4-sigma0.9")
    for bad, why in ((tmp_path / "nowhere", "no live/ folder"), (tmp_path / "study", "the study itself")):
        with pytest.raises(SystemExit) as exc:
            main(["--out", str(tmp_path / "study"), "--repeat-of", str(bad), "--no-realtime-client"])
        assert exc.value.code == 2 and why in capsys.readouterr().err
        rc = servetwin_main(["twin-study", "--out", str(tmp_path / "study"), "--repeat-of", str(bad)])
        err = capsys.readouterr().err
        assert rc == 2 and why in err and len(err.strip().splitlines()) == 1    # the same from `servetwin`


def test_twin_study_pins_its_cells_so_a_refit_does_not_start_a_new_study(tmp_path: Path, monkeypatch):
    import calibrate.twin.study as ts
    searches = []

    class Cap:
        keeps_rate = 0.7

    def fake_search(*args, **kw):          # the knee search itself is tested in test_fluid_sim.py
        searches.append(args)
        return Cap()

    monkeypatch.setattr(ts, "capacity_search", fake_search)
    monkeypatch.setattr(ts, "knee_profile", lambda out: tmp_path / "knee-sglang.yaml")
    assert ts.study_cells(tmp_path, quick=False, rate=None)() is None      # SGLang not probed yet: no search
    (tmp_path / "probes" / "sglang-c512").mkdir(parents=True)
    (tmp_path / "probes" / "sglang-c512" / "run.json").write_text("{}")
    assert ts.study_cells(tmp_path, quick=False, rate=None)() is None      # its chunked configuration: not enough
    (tmp_path / "probes" / "sglang").mkdir(parents=True)
    (tmp_path / "probes" / "sglang" / "run.json").write_text("{}")         # its default configuration: the search
    first = ts.study_cells(tmp_path, quick=False, rate=None)()
    assert first == [(0.42, 0.9), (0.77, 0.9), (0.42, 0.5)] and len(searches) == 1
    Cap.keeps_rate = 2.0                    # a refitted profile would move the knee …
    assert ts.study_cells(tmp_path, quick=False, rate=None)() == first      # … the cells stay
    assert len(searches) == 1
    assert ts.study_cells(tmp_path, quick=True, rate=0.3)() == [(0.3, 0.9)]


def test_probe_fit_takes_each_shapes_fastest_repeat(tmp_path: Path):
    """One repeat in three of every decode probe 3x slower (vLLM's CPU build at short context): the fit
    still predicts unprobed shapes as the undisturbed engine runs them."""
    synthetic_probes(tmp_path / "p", noise=0.02, seed=2, disturbed=3.0)
    res, _ = fit_probes([tmp_path / "p"], "vllm-v1", "tiny-llama", "cpu-base", tmp_path / "fitted.yaml")
    true_cm = CostModel(with_params(load_hardware("cpu-base"), "vllm-v1", TRUE), load_model("tiny-llama"), "vllm-v1")
    fit_cm = CostModel(with_params(load_hardware("cpu-base"), "vllm-v1", res.params), load_model("tiny-llama"),
                       "vllm-v1")
    for shape in _held_out_shapes():
        assert fit_cm.step_time(shape) == pytest.approx(true_cm.step_time(shape), rel=0.08)


def test_sglang_mixed_probe_is_its_window_of_exact_steps():
    from calibrate.probe_fit import _sglang_mixed_window
    cpu = _sglang_mixed_window(4096, 8, {"chunked_prefill_size": 512, "device": "cpu"})
    assert cpu[0][0] == 0.5 and cpu[0][1].decodes == 8                  # the decode step under way, half left
    chunks = [b for _, b in cpu[1:-1]]
    assert [b.prefill_ctx for b in chunks] == list(range(0, 4096, 512))  # each chunk at its own offset
    assert all(b.prefill_tokens == 512 and b.decodes == 0 for b in chunks)   # alone: the decodes wait
    assert cpu[-1] == (1.0, cpu[0][1])                                   # inline forward: one decode more
    gpu = _sglang_mixed_window(2048, 4, {"chunked_prefill_size": 4096, "device": "cuda"})
    assert len(gpu) == 2 and gpu[1][1].prefill_tokens == 2048 and gpu[1][1].prefill_ctx == 0


def test_sglang_fit_prices_a_shared_prefix_as_unshared_and_leaves_its_shared_decode_probes_out(tmp_path: Path):
    """SGLang's CPU decode gathers each request's KV apart, and under load a shared prefix saves it nothing
    (docs/studies/twin-3-calibration.md): however much faster an idle engine ran the shared-prefix decode probe, the fit
    keeps ``kv_shared_cost`` at 1, does not fit that probe, and says so; vLLM's fit frees it."""
    from calibrate.probe_fit import free_params
    sglang_batched_probes(tmp_path / "p", TRUE, batched=False, shared=0.4)
    res, obs = fit_probes([tmp_path / "p"], "sglang", "tiny-llama", "cpu-base", tmp_path / "f.yaml")
    assert "kv_shared_cost" not in res.params and not [o for o, _, k in obs if k == "decode" and o.decode_distinct >= 0]
    assert load_hardware(str(tmp_path / "f.yaml")).kv_shared_cost == 1.0
    fit = yaml.safe_load((tmp_path / "f.yaml").read_text())["fit"]
    assert fit["not_fitted"]["shared-prefix decode probes"] == 1
    assert "kv_shared_cost" in free_params("vllm-v1") and "kv_shared_cost" not in free_params("sglang")


def test_chunk_budget_read_from_each_engines_resolved_configuration():
    from calibrate.probe_fit import chunk_budget, free_params
    assert chunk_budget({"enable_chunked_prefill": False, "arg.max_num_batched_tokens": 8192}) is None
    assert chunk_budget({"arg.enable_chunked_prefill": True, "arg.max_num_batched_tokens": 512}) == 512
    assert chunk_budget({"chunked_prefill_size": 4096, "device": "cpu"}) == 4096
    assert chunk_budget({"chunked_prefill_size": -1}) is None
    # the front end's latency is a free coefficient only where it has cores of its own (vLLM's CPU backend)
    assert "request_s" in free_params("vllm-v1") and "request_s" not in free_params("sglang")


def test_twin_study_client_table_names_each_engines_busiest_process():
    """Per configuration, the engine process that ran most and how long its threads waited for a CPU,
    averaged over seeds; a configuration whose runs did not account for processes says so with "—"."""
    from types import SimpleNamespace

    from calibrate.twin.tables import client_table

    def run(cfg: str, procs: dict | None) -> SimpleNamespace:
        return SimpleNamespace(meta={"engine": cfg, "client": {"scheduling": "fifo"},
                                     "dispatch_lag_s": {"p99": 0.001, "max": 0.002},
                                     "host": {"engine_processes": procs} if procs is not None else {}})

    def procs(fwd_cpu: float, fwd_wait: float) -> dict:
        return {"sglang::schedul 12": {"cpu_s": 76.0, "cpu_share": fwd_cpu, "wait_s": 9.0, "wait_share": fwd_wait},
                "python 10": {"cpu_s": 3.0, "cpu_share": 0.07, "wait_s": 3.6, "wait_share": 0.08}}

    t = client_table([run("sglang-lpm", procs(1.6, 0.18)), run("sglang-lpm", procs(1.8, 0.22)),
                      run("vllm-nochunk", None)]).set_index("config")
    assert t.loc["sglang-lpm", "engine_busiest_process"] == "sglang::schedul: 1.70 CPU, waited 20%"
    assert t.loc["vllm-nochunk", "engine_busiest_process"] == "—"


def sglang_batched_probes(path: Path, true: dict, batched: bool, seed: int = 5, shared: float | None = None) -> None:
    """An SGLang probe record (lone prefills, cached prefills, decodes; with ``batched``, k requests over
    one cached prefix at once) whose times come from the cost model with ``true`` coefficients (+1 %
    noise); a batch of k is timed as the engine runs it: the first request alone, the rest together. With
    ``shared``, 8 decodes sharing 1,856 of their 2,100 tokens, timed as if the engine paid ``shared`` of a
    first read for the shared part."""
    hw = with_params(load_hardware("cpu-base"), "sglang", true)
    cm = CostModel(hw, load_model("tiny-llama"), "sglang")
    rng = np.random.default_rng(seed)
    rows, probes = [], []

    def add(kind: str, n: int, ctx: int, c: int, t: float, tokens: int = 1, rep: int = 0, first: float = 0.0) -> None:
        rid = len(rows)
        f = first or 0.01 + t * (1 + rng.normal(0, 0.01))
        rows.append({"request_id": rid, "dag_id": rid, "role": "probe", "planned_s": 0.0, "send_s": 0.01,
                     "first_token_s": f, "last_token_s": f + (tokens - 1) * t, "output_tokens": tokens,
                     "prompt_tokens": n + ctx, "cached_tokens": np.nan, "ok": True, "error": ""})
        probes.append(dataclasses.asdict(ProbeRow(rid, kind, n, ctx, c, rep, tokens)))

    def prefills(k: int, n: int, ctx: int) -> float:
        b = BatchShape()
        for _ in range(k):
            b.add_prefill(n, ctx, True)
        return cm.step_time(b)
    for rep in range(2):
        for n in (128, 512, 1024, 2048):
            add("prefill", n, 0, 1, prefills(1, n, 0), rep=rep)
        for ctx, n in ((512, 64), (2048, 64), (1024, 1024), (1856, 192)):
            add("cached", n, ctx, 1, prefills(1, n, ctx), rep=rep)
        for c in (1, 2, 4, 8, 16):
            b = BatchShape()
            for _ in range(c):
                b.add_decode(2100)
            for out in (16, 64):
                for _ in range(c):
                    add("decode", 1, 2100, c, cm.step_time(b), tokens=out, rep=rep, first=0.05 * c)
        if shared is not None:
            b = BatchShape()
            for _ in range(8):
                b.add_decode(2100)
            b.decode_distinct = 1856 + 8 * (2100 - 1856)
            t = CostModel(dataclasses.replace(hw, kv_shared_cost=shared), load_model("tiny-llama"),
                          "sglang").step_time(b)
            for out in (16, 64):
                for _ in range(8):
                    add("decode", 1856, 2100, 8, t, tokens=out, rep=rep, first=0.4)
        for k in (2, 4, 8) if batched else ():
            end = 0.01 + (prefills(1, 192, 1856) + prefills(k - 1, 192, 1856)) * (1 + rng.normal(0, 0.01))
            for _ in range(k):
                add("batched", 192, 1856, k, 0.0, rep=rep, first=end)
    meta = {"run_id": "p", "source": "probe", "trace_digest": "", "scenario": {}, "seed": 0, "engine": "probe",
            "engine_config": {"block_size": 1, "chunked_prefill_size": 4096}, "hardware": "live",
            "model": "tiny-llama", "offered_load_rps": 0.0, "run_window": {"duration_s": 1.0}, "exclusion": {},
            "telemetry_summary": {}, "versions": {}, "probes": probes}
    write_run(RunRecord(meta=meta, requests=pd.DataFrame(rows)), path)


def test_batched_probes_separate_each_prefilled_requests_cost_from_the_steps(tmp_path: Path):
    """An engine whose prefill cost is per request (15 ms each, as SGLang's CPU path: k requests at once
    take about k times one): lone prefills cannot tell that from a step's fixed cost, and the fit prices
    8 at once low; probing 2, 4 and 8 at once recovers it."""
    true = {**TRUE, "step_eager_s": 0.001, "per_prefill_seq_s": 0.015}
    cm = CostModel(with_params(load_hardware("cpu-base"), "sglang", true), load_model("tiny-llama"), "sglang")
    eight = BatchShape()
    for _ in range(8):
        eight.add_prefill(192, 1856, True)
    for batched in (False, True):
        sglang_batched_probes(tmp_path / str(batched), true, batched)
        res, obs = fit_probes([tmp_path / str(batched)], "sglang", "tiny-llama", "cpu-base", tmp_path / "f.yaml")
        fit = CostModel(with_params(load_hardware("cpu-base"), "sglang", res.params), load_model("tiny-llama"),
                        "sglang")
        err = fit.step_time(eight) / cm.step_time(eight) - 1
        if batched:
            assert [len(o.steps) for o, _, k in obs if k == "batched"] == [2, 2, 2]    # alone, then the rest
            assert res.params["per_prefill_seq_s"] == pytest.approx(0.015, abs=0.003)
            assert abs(err) < 0.05
            assert load_hardware(str(tmp_path / "f.yaml")).overhead("sglang").per_prefill_seq_s == pytest.approx(
                res.params["per_prefill_seq_s"], abs=1e-6)
        else:
            assert "per_prefill_seq_s" not in res.params and err < -0.1
