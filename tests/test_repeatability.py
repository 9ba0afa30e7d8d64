"""The repeatability measurement: one trace served N times on one instance (engine and client faked here;
the live path is the twin study's), and the spread of what the runs measured."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

import calibrate.twin.live as tl
from analysis.metrics import run_metrics
from calibrate.twin.diagnose.repeatability import main, repeat_table, serve_repeats, spread
from foundation.errors import ServetwinError
from simulator.simulate import simulate


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    events: list[tuple[str, ...]] = []

    class Engine:
        url, pid, log_path = "http://fake", 1, Path("fake.log")

        def start(self) -> Engine:
            events.append(("start",))
            return self

        def stop(self) -> None:
            events.append(("stop",))

    def run_live(trace: Any, cfg: Any, opts: Any, dest: Path) -> Any:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "run.json").write_text("{}")
        events.append(("run", dest.name, str(trace.duration_s), str(opts.cold_cache)))
        return SimpleNamespace(meta={"passed": True})

    monkeypatch.setattr(tl, "engine", lambda kind, opts, log: Engine())
    monkeypatch.setattr(tl, "run_live", run_live)
    monkeypatch.setattr(tl, "compile_trace", lambda sc: sc)
    return events


def test_one_instance_serves_the_trace_n_times_from_a_cold_cache_and_resumes(tmp_path: Path,
                                                                           served: list[tuple[str, ...]]) -> None:
    dirs = serve_repeats(tmp_path, "vllm-c512", 0.66, 0.9, 20.0, 3)
    assert [d.name for d in dirs] == ["run-0", "run-1", "run-2"]
    assert served == [("start",)] + [("run", f"run-{i}", "20.0", "True") for i in range(3)] + [("stop",)]
    served.clear()
    serve_repeats(tmp_path, "vllm-c512", 0.66, 0.9, 20.0, 3)
    assert served == []                                        # all recorded: no engine started
    (tmp_path / "run-1" / "run.json").unlink()
    serve_repeats(tmp_path, "vllm-c512", 0.66, 0.9, 20.0, 3)
    assert [e[:2] for e in served] == [("start",), ("run", "run-1"), ("stop",)]
    with pytest.raises(ServetwinError, match="not a twin-study configuration"):
        serve_repeats(tmp_path, "vllm-big", 0.66, 0.9, 20.0, 3)


def test_spread_by_hand() -> None:
    t = spread(pd.DataFrame({"run": ["a", "b", "c"], "ttft_p50": [1.0, 2.0, 4.0]})).set_index("metric")
    r = t.loc["ttft_p50"]
    assert r["runs"] == 3 and r["median"] == 2.0 and r["max_over_min"] == 4.0
    assert r["cv"] == pytest.approx(np.std([1, 2, 4], ddof=1) / (7 / 3))
    assert r["loo_abs_log"] == pytest.approx((math.log(2) * 1.5 + 0 + math.log(2) * 1.5) / 3)   # 1.04, 0, 1.04


def test_repeat_table_holds_each_runs_metrics_and_refuses_other_traces(small_trace: Any) -> None:
    a = simulate(small_trace, "vllm-v1", "l4", "llama-3.1-8b", {})
    b = simulate(small_trace, "vllm-v1", "l4", "llama-3.1-8b", {"max_num_seqs": 4})
    t = repeat_table([a, b])
    assert list(t.columns) == ["run", "ttft_p50", "e2e_p50", "tpot_p50"]
    assert t["e2e_p50"].iloc[1] == pytest.approx(float(run_metrics(b)["e2e_p50"]))
    b.meta["engine"] = "other-config"
    with pytest.raises(ServetwinError, match="different configurations"):
        repeat_table([a, b])
    b.meta["trace_digest"] = "other"
    with pytest.raises(ServetwinError, match="different traces"):
        repeat_table([a, b])


def test_summary_of_too_few_runs_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--summary-only", "--times", "3"]) != 0
    assert "0 recorded run(s) of the 3 asked" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        main(["--out", str(tmp_path), "--times", "1"])
    assert err.value.code == 2 and "--times 1" in capsys.readouterr().err
