"""Calibration that cannot silently go wrong: a fit that fails its quality gates is refused with one line
naming the worst probe kind and the likely cause, written only with --accept-poor-fit (and then marked, and
the mark printed by simulate and compare)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.records import read_run, write_run
from calibrate.gates import KIND_MAX, failure, kind_errors, scale_failure
from servetwin.cli import main
from simulator.profiles import load_hardware
from tests.test_compare import synthetic_probes

ROOT = Path(__file__).parent.parent


def poison(src: Path, dst: Path, extra_s: float = 0.002, lag: dict | None = None) -> Path:
    """The probe record with the decode steps of its sparse decode probes (≤ 4 streams) ``extra_s`` slower,
    as a client woken late for every chunk sees them (with many streams one wake-up reads many chunks). Were
    every decode step 2 ms slower, the fit would take it as a slower engine (its decode-step overhead) — a
    fit cannot tell that from an engine that is slower, and the client-lag gate is what catches it."""
    rec = read_run(src)
    decode = {p["request_id"]: p["max_tokens"] for p in rec.meta["probes"]
              if p["kind"] == "decode" and p["concurrency"] <= 4}
    r = rec.requests
    hit = r["request_id"].isin(list(decode))
    r.loc[hit, "last_token_s"] += r.loc[hit, "request_id"].map(decode) * extra_s
    if lag is not None:
        rec.meta["client_lag"] = lag
    write_run(rec, dst)
    return dst


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("probes") / "p"
    synthetic_probes(d, noise=0.02, seed=1)
    return d


def fit(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    rc = main(["calibrate", "fit", *map(str, args), "--engine", "vllm-v1", "--model", "tiny-llama",
               "--base", "cpu-base"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_good_fit_passes_and_is_written_unmarked(probes: Path, tmp_path: Path, capsys):
    rc, out, err = fit(capsys, probes, "--out", tmp_path / "ok.yaml")
    assert rc == 0 and "R²" in out and not err
    assert load_hardware(str(tmp_path / "ok.yaml")).poor_fit == ""


def test_a_poisoned_probe_record_is_refused_with_one_line_naming_decode(probes: Path, tmp_path: Path, capsys):
    lag = {"p50_s": 0.0004, "p99_s": 0.035, "max_s": 0.14, "samples": 9000, "tick_s": 0.005, "scheduling": "normal"}
    bad = poison(probes, tmp_path / "bad", lag=lag)
    rc, out, err = fit(capsys, bad, "--out", tmp_path / "f.yaml")
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and "Traceback" not in err
    assert "'decode'" in err and "kept off a CPU" in err and "35 ms" in err and "nothing written" in err
    assert not (tmp_path / "f.yaml").exists()


def test_probes_of_a_lagging_client_are_refused_however_well_they_fit(probes: Path, tmp_path: Path, capsys):
    lag = {"p50_s": 0.001, "p99_s": 0.025, "max_s": 0.09, "samples": 9000, "tick_s": 0.005, "scheduling": "normal"}
    bad = poison(probes, tmp_path / "lagged", extra_s=0.0, lag=lag)
    rc, _, err = fit(capsys, bad, "--out", tmp_path / "f.yaml")
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "25 ms late at p99" in err
    assert not (tmp_path / "f.yaml").exists()


def test_accept_poor_fit_writes_it_marked_and_simulate_prints_the_mark(probes: Path, tmp_path: Path, capsys):
    bad = poison(probes, tmp_path / "bad")
    rc, _, err = fit(capsys, bad, "--out", tmp_path / "f.yaml", "--accept-poor-fit")
    assert rc == 0 and "accept-poor-fit" in err
    mark = load_hardware(str(tmp_path / "f.yaml")).poor_fit
    assert "decode" in mark and "no client-lag measurement" in mark     # the record predates the lag monitor
    rc = main(["simulate", "--scenario", str(ROOT / "scenarios" / "examples" / "cpu-small.yaml"), "--engine",
               "vllm-v1", "--hardware", str(tmp_path / "f.yaml"), "--model", "tiny-llama", "--set",
               "num_gpu_blocks=2048", "--context", "8192", "--out", str(tmp_path / "r")])
    assert rc == 0 and "written with --accept-poor-fit" in capsys.readouterr().err


def test_gates_name_the_worst_kind_then_r2_then_mape():
    q = {"r2": 0.999, "mape": 0.04, "per_probe_error": [{"kind": "prefill", "measured_s": 0.01, "error": 0.02},
                                                        {"kind": "decode", "measured_s": 0.002, "error": -0.7},
                                                        {"kind": "decode", "measured_s": 0.002, "error": -0.72}]}
    assert kind_errors(q["per_probe_error"]) == {"decode": pytest.approx(-0.71), "prefill": 0.02}
    assert "'decode'" in (failure(q) or "")
    q["per_probe_error"] = q["per_probe_error"][:1]
    assert failure(q) is None
    assert "R²" in (failure({**q, "r2": 0.9}) or "") and "MAPE" in (failure({**q, "mape": 0.2}) or "")


def test_a_decode_scale_that_one_number_does_not_describe_fails_its_gate():
    assert scale_failure([1.0, 1.05, 0.97], [100, 100, 100], 1.0) is None
    assert scale_failure([1.0, 1.6, 1.7], [50, 100, 100], 1.0) is not None
    assert scale_failure([1.0 + KIND_MAX * 0.9], [10], 1.0) is None


def test_probe_records_its_clients_lag_per_probe_and_overall(tmp_path: Path):
    """The lag monitor sees a client whose event loop is blocked: here a decode probe's stream handler is
    held for 30 ms per chunk read, as a client kept off a CPU would be."""
    import time

    import calibrate.probes as pb
    from tests.fake_openai import FakeOpenAI
    srv = FakeOpenAI(token_s=0.002).start()
    plan = pb.ProbePlan(prefill_lengths=(16,), cached=(), decode_batches=(1,), decode_contexts=(16,),
                        shared_decode=(), mixed=(), decode_tokens=8, repeats=1, warm_passes=0)
    try:
        quiet = pb.probe(srv.url, "fake", tmp_path / "quiet", plan)
        real_send = pb.Prober._send

        async def starved(self, prompt, max_tokens, row):  # type: ignore[no-untyped-def]
            time.sleep(0.03)                                  # the loop cannot run: a client off its CPU
            return await real_send(self, prompt, max_tokens, row)
        pb.Prober._send = starved  # type: ignore[method-assign]
        try:
            busy = pb.probe(srv.url, "fake", tmp_path / "busy", plan)
        finally:
            pb.Prober._send = real_send  # type: ignore[method-assign]
    finally:
        srv.stop()
    for rec in (quiet, busy):
        lag = read_run(rec.path).meta["client_lag"]
        assert lag["samples"] > 0 and {"p50_s", "p99_s", "max_s", "scheduling"} <= set(lag)
        assert all("client_lag_s" in p for p in rec.meta["probes"])
    assert busy.meta["client_lag"]["max_s"] >= 0.025          # (a quiet run's lag depends on the host's load)
