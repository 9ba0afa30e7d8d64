"""calibrate.twin.bias: over several studies of the same cells, a check the twin misses the same way in
every study is a systematic bias of the model; one it misses either way by study is noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from calibrate.twin.bias import main, study_bias
from foundation.errors import ServetwinError

CELLS = {"knee": 0.5, "conditions": [[0.36, 0.9], [0.66, 0.9]]}


def _study(root: Path, name: str, e2e: float, ttft: float, phi: float, cells: dict = CELLS,
           cpu: str = "AMD EPYC") -> Path:
    """A study folder with its pinned cells, one live run's record of its CPU, and three held-out checks:
    simulated E2E and TTFT as the given multiples of the measured, φ off by ``phi``."""
    out = root / name
    run = out / "live" / "rate0.66-sigma0.9" / "vllm-c512" / "seed-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"host": {"cpu": {"model_name": cpu, "isa": ["avx2"]}}}))
    (out / "conditions.json").write_text(json.dumps(cells))
    rows = [("engine e2e_p50", "vllm-c512", 1.0, e2e, 0.15), ("engine ttft_p50", "sglang-lpm", 0.4, 0.4 * ttft, 0.15),
            ("phi ttft_p50", "defaults vs matched", 0.3, 0.3 + phi, None)]
    pd.DataFrame([{"cell": "rate0.66-sigma0.9", "target": t, "what": w, "measured": m, "simulated": s,
                   "error": (s / m - 1) if tol else s - m,
                   "met": abs(s / m - 1) <= tol if tol else abs(s - m) <= 0.15} for t, w, m, s, tol in rows]
                 ).to_csv(out / "targets.csv", index=False)
    return out


def test_a_bias_the_same_in_every_study_is_systematic_and_noise_is_not(tmp_path: Path):
    """E2E 25 % slow (±1 %) in four studies: systematic, beyond 15 %, met in none. TTFT ±30 % by study
    around zero: met in none either, yet no bias — the noise, not the model, misses it. φ +0.05 ± 0.01:
    systematic but within ±0.15."""
    outs = [_study(tmp_path, f"s{k}", e2e, ttft, phi) for k, (e2e, ttft, phi) in
            enumerate([(1.24, 1.3, 0.05), (1.26, 1 / 1.3, 0.04), (1.25, 1.3, 0.06), (1.25, 1 / 1.3, 0.05)])]
    table, by = study_bias(outs)
    row = table.set_index("target")
    e2e, ttft, phi = row.loc["engine e2e_p50"], row.loc["engine ttft_p50"], row.loc["phi ttft_p50"]
    assert e2e["studies"] == 4 and e2e["met_in"] == 0
    assert e2e["bias"] == pytest.approx(math.exp((math.log(1.24) + 2 * math.log(1.25) + math.log(1.26)) / 4) - 1)
    assert e2e["systematic"] and not e2e["bias_met"] and e2e["bias_lo"] > 0.2
    assert ttft["met_in"] == 0 and abs(ttft["bias"]) < 1e-9 and not ttft["systematic"] and ttft["bias_met"]
    assert ttft["bias_lo"] < -0.15 and ttft["bias_hi"] > 0.15         # four studies cannot pin it closer
    assert phi["bias"] == pytest.approx(0.05) and phi["systematic"] and phi["bias_met"]
    counts = by.set_index("target")
    assert counts.loc["engine e2e_p50", "systematic_beyond_tolerance"] == 1
    assert counts.loc["engine ttft_p50", "systematic"] == 0 and counts.loc["phi ttft_p50", "bias_met"] == 1


def test_studies_of_other_cells_or_cpus_or_without_checks_are_refused(tmp_path: Path, capsys):
    a = _study(tmp_path, "a", 1.0, 1.0, 0.0)
    other = _study(tmp_path, "other", 1.0, 1.0, 0.0, cells={"knee": 0.5, "conditions": [[0.4, 0.9]]})
    with pytest.raises(ServetwinError, match="cells differ"):
        study_bias([a, other])
    xeon = _study(tmp_path, "xeon", 1.0, 1.0, 0.0, cpu="Intel Xeon")
    with pytest.raises(ServetwinError, match="different CPUs are not repeats"):
        study_bias([a, xeon])
    with pytest.raises(ServetwinError, match="two or more studies"):
        study_bias([a])
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "conditions.json").write_text(json.dumps(CELLS))
    assert main([str(a), str(bare)]) == 1
    err = capsys.readouterr().err
    assert "bare/targets.csv: not found" in err and "--report-only" in err
