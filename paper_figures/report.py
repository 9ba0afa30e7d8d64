"""``servetwin report``: one self-contained HTML page (figures embedded) with the study's tables, the
figures, and every run's resolved configuration and metadata, for sharing a campaign."""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path

import pandas as pd

from analysis.records import RunRecord
from analysis.redact import redact
from analysis.tables import all_tables
from foundation.outputs import write_file
from paper_figures.figures import headline_figures

STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
         "text-align:right}th{background:#f3f3f3}img{max-width:100%}details{margin:.3em 0}pre{font-size:11px}")


def _table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>none</em></p>"
    return df.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0, na_rep="—")


def build_report(runs: list[RunRecord], out: str | Path, title: str = "servetwin report") -> Path:
    tables = all_tables(runs)
    parts = ["<!doctype html><!-- servetwin:report -->",
             f"<meta charset='utf-8'><title>{html.escape(title)}</title><style>{STYLE}</style>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p>{len(runs)} runs: {sum(r.meta.get('source') == 'sim' for r in runs)} simulated, "
             f"{sum(r.meta.get('source') == 'live' for r in runs)} live. Gaps are the first configuration of an arm "
             "over the second, geometric means over seeds with 95% log-scale t intervals.</p>"]
    for name in ("decomposition", "gaps", "absolute", "workload", "control_arm", "dispersion"):
        parts += [f"<h2>{name}</h2>", _table(tables[name])]
    with tempfile.TemporaryDirectory() as d:
        made = headline_figures(runs, Path(d))
        missing = (Path(d) / "MISSING.txt").read_text().strip()
        parts.append("<h2>figures</h2>")
        for p in made:
            b64 = base64.b64encode(p.read_bytes()).decode()
            parts.append(f"<h3>{p.stem}</h3><img alt='{p.stem}' src='data:image/png;base64,{b64}'>")
        if missing:
            parts.append(f"<p><em>not drawn:</em></p><pre>{html.escape(missing)}</pre>")
    parts.append("<h2>runs</h2>")
    for r in sorted(runs, key=lambda r: r.run_id):
        meta = {k: r.meta.get(k) for k in ("run_id", "source", "engine", "seed", "hardware", "model", "trace_digest",
                                            "offered_load_rps", "run_window", "exclusion", "telemetry_summary",
                                            "labels", "versions")}
        blob = json.dumps(redact({**meta, "engine_config": r.meta.get("engine_config")}), indent=1, default=str)
        parts.append(f"<details><summary>{html.escape(r.run_id)}</summary><pre>{html.escape(blob)}</pre></details>")
    return write_file(out, "\n".join(parts) + "\n", "report")
