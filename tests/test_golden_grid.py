"""Behaviour pinned: a small grid over all four engine presets, both arms, below and past the knee, gives the same
requests and telemetry as recorded in ``tests/data/golden-grid.json``. A refactor must leave it unchanged; a change
of behaviour updates the digests on purpose (``python tests/test_golden_grid.py --update``) and says so in its
commit. Times are compared to the nanosecond (rounded to 1e-9 s), every other column exactly."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden-grid.json"
GRID = {
    "name": "golden", "seeds": [1],
    "base": {"duration_s": 60, "arrivals": {"rate": 0.3}, "prompts": {"length": 1024, "sharing": 0.9}},
    "sweep": {"arrivals.rate": [0.3, 1.5]},
    "arms": {"released": {"vllm": {"engine": "vllm-0.6.3", "set": {"num_gpu_blocks": 1030}},
                          "sglang": {"engine": "sglang-0.4.1", "set": {"max_total_tokens": 6000}}},
             "current": {"vllm": {"engine": "vllm-v1", "set": {"num_gpu_blocks": 1030}},
                         "sglang": {"engine": "sglang-current", "set": {"chunked_prefill_size": 512}}}},
}


def frame_digest(df: pd.DataFrame) -> str:
    """The frame's columns, dtypes and values (floats to 1e-9), independent of the Parquet writer's metadata."""
    df = df.copy()
    for c in df.columns:
        if pd.api.types.is_float_dtype(df[c]):
            df[c] = np.round(df[c].to_numpy(), 9)
    h = hashlib.sha256(json.dumps([[str(c), str(t)] for c, t in df.dtypes.items()]).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()


def digests(out: Path) -> dict[str, dict[str, str]]:
    from analysis.records import find_runs, read_run
    res = {}
    for run in sorted(find_runs([out])):
        rec = read_run(run)
        res[str(run.relative_to(out))] = {"requests": frame_digest(rec.requests),
                                          "telemetry": frame_digest(rec.telemetry)}
    return res


def simulate_grid(out: Path) -> dict[str, dict[str, str]]:
    import yaml

    from scenarios.grid import cells, load_grid
    from simulator.sweep import run_cells
    g = out.parent / "golden.yaml"
    g.write_text(yaml.safe_dump(GRID))
    run_cells(cells(load_grid(g)), out, jobs=1)
    return digests(out)


def test_a_small_grid_over_every_preset_is_unchanged(tmp_path: Path):
    got = simulate_grid(tmp_path / "out")
    want = json.loads(GOLDEN.read_text())
    assert len(got) == 8
    changed = sorted(k for k in want if got.get(k) != want[k])
    assert got.keys() == want.keys() and not changed, f"behaviour changed in {changed}"


def test_the_digest_sees_a_one_nanosecond_change_and_ignores_less():
    df = pd.DataFrame({"t": [0.1, 0.2], "n": [1, 2]})
    base = frame_digest(df)
    assert frame_digest(df.assign(t=[0.1, 0.2 + 2e-9])) != base
    assert frame_digest(df.assign(t=[0.1, 0.2 + 1e-13])) == base
    assert frame_digest(df.assign(n=[1, 3])) != base


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    import tempfile
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(simulate_grid(Path(d) / "out"), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
