"""``servetwin paper``: the reference study's headline grid on the default L4 profile, both engines,
both arms; prints the decomposition table and where each engine keeps pace; writes runs, tables and
figures under the output directory."""

from __future__ import annotations

import sys
from pathlib import Path

from analysis.records import find_runs, read_run
from analysis.tables import all_tables, to_markdown
from foundation.outputs import atomic_text
from scenarios.grid import cells, load_grid
from simulator.sweep import pending, run_cells

GRIDS = Path(__file__).resolve().parent.parent / "scenarios" / "grids"


def run_paper(out: Path, quick: bool = False, jobs: int = 0) -> int:
    grid = load_grid(GRIDS / "headline.yaml")
    scale = 1 / 3 if quick else 1.0
    cs = cells(grid, scale)
    runs_dir = out / ("runs-quick" if quick else "runs")
    todo = pending(cs, runs_dir)
    print(f"servetwin paper: {len(cs)} runs ({len(cs) - len(todo)} already done) on {grid.hardware}, "
          f"{grid.model}; {'quick: durations ×1/3' if quick else 'study durations'}", file=sys.stderr)
    run_cells(cs, runs_dir, jobs=jobs)
    runs = [read_run(p) for p in find_runs([runs_dir])]
    tables = all_tables(runs)
    abs_t = tables["absolute"][["condition", "arm", "config", "ttft_p50", "ttft_p95", "tpot_p50", "throughput",
                                "offered_load", "realised_load", "keeps_pace", "seeds_keeping_pace_realised", "kv_peak",
                                "preemptions_max"]]
    dec = tables["decomposition"]
    text = ("## Decomposition (gap = vLLM / SGLang; φ = share of the defaults gap removed by matching "
            "chunked prefill)\n\n" + to_markdown(dec) + "\n## Per configuration (geometric means over seeds)\n\n"
            + to_markdown(abs_t))
    print(text)
    atomic_text(out / "tables.md", text + "\n## Gaps\n\n" + to_markdown(tables["gaps"]))
    try:
        from paper_figures.figures import headline_figures
        written = headline_figures(runs, out / "figures")
        print(f"wrote {out}/tables.md and {len(written)} figures in {out}/figures", file=sys.stderr)
    except ImportError:
        print(f"wrote {out}/tables.md", file=sys.stderr)
    return 0
