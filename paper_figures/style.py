"""One consistent, deterministic figure style (same runs → same bytes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


class MissingRuns(Exception):
    """A figure cannot be drawn from the runs given; the message says which runs it needs."""


COLORS = {"vllm": "#1f6fb4", "sglang": "#d1495b", "other": "#3c8d2f"}
MARKERS = {"defaults": "o", "matched": "s"}
RC: dict[str, Any] = {"figure.dpi": 110, "savefig.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
      "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
      "svg.hashsalt": "servetwin", "path.simplify": False}


def color(config: str) -> str:
    for k, v in COLORS.items():
        if k in config:
            return v
    return COLORS["other"]


def new(width: float = 6.0, height: float = 3.6, ncols: int = 1):  # type: ignore[no-untyped-def]
    plt.rcParams.update(RC)  # type: ignore[arg-type]
    return plt.subplots(1, ncols, figsize=(width, height), squeeze=False)


def save(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path
