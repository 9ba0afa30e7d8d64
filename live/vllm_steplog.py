"""vLLM's own step log: every engine iteration's batch and forward time, as vLLM logs them.

vLLM (0.32 here) logs each iteration with ``--enable-logging-iteration-details``: how many requests and
tokens it prefilled ("context") and decoded ("generation"), and the time the engine core waited for the
forward's result ("iteration elapsed time"). The line is written by the API server's stat logger when it
handles that step's outputs, so its time is when the step's tokens were about to be streamed. vLLM's own
log format stamps whole seconds; a local instance started with ``VllmCpu(step_log=PATH)`` routes the
stat logger to ``PATH`` with Unix times to the microsecond (``logging_config``), comparable with a live
run's client timestamps on the same host. Read with ``read_steps``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from foundation.errors import ServetwinError

STAT_LOGGER = "vllm.v1.metrics.loggers"      # the logger that writes "Iteration(…)" lines
LINE = re.compile(r"^(?P<t>\d+\.\d+) .*Iteration\((?P<iteration>\d+)\): (?P<ctx_requests>\d+) context requests, "
                  r"(?P<ctx_tokens>\d+) context tokens, (?P<gen_requests>\d+) generation requests, "
                  r"(?P<gen_tokens>\d+) generation tokens, iteration elapsed time: (?P<elapsed_ms>[\d.]+) ms")
COLUMNS = ["t_unix", "iteration", "ctx_requests", "ctx_tokens", "gen_requests", "gen_tokens", "elapsed_s"]


def logging_config(step_log: Path) -> Path:
    """Write (beside ``step_log``) the logging configuration vLLM reads from ``VLLM_LOGGING_CONFIG_PATH``:
    its log to stdout as usual, its stat logger's lines to ``step_log`` with Unix times to the microsecond."""
    step_log = Path(step_log).resolve()
    step_log.parent.mkdir(parents=True, exist_ok=True)
    plain = "(pid=%(process)d) %(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
    cfg = {"version": 1, "disable_existing_loggers": False,
           "formatters": {"plain": {"format": plain},
                          "steps": {"format": "%(created).6f %(process)d %(message)s"}},
           "handlers": {"stdout": {"class": "logging.StreamHandler", "formatter": "plain", "level": "INFO",
                                   "stream": "ext://sys.stdout"},
                        "steps": {"class": "logging.FileHandler", "formatter": "steps", "level": "INFO",
                                  "filename": str(step_log), "mode": "w"}},
           "loggers": {"vllm": {"handlers": ["stdout"], "level": "INFO", "propagate": False},
                       STAT_LOGGER: {"handlers": ["steps"], "level": "INFO", "propagate": False}}}
    path = step_log.with_name(step_log.name + ".logging.json")
    path.write_text(json.dumps(cfg, indent=1) + "\n")
    return path


def read_steps(path: str | Path) -> pd.DataFrame:
    """One row per logged iteration: its Unix time, index, prefilled requests and tokens, decoded requests
    and tokens, and forward time (s). An error if the file has no iteration line."""
    p = Path(path)
    if not p.is_file():
        raise ServetwinError(f"{p}: no vLLM step log (start the engine with VllmCpu(step_log=…) or "
                             "`python -m live.local_engine --step-log FILE`)")
    rows = [m.groupdict() for m in map(LINE.match, p.read_text(errors="replace").splitlines()) if m]
    if not rows:
        raise ServetwinError(f"{p}: no 'Iteration(…)' line; the engine was not started with "
                             "--enable-logging-iteration-details and the step-log configuration")
    df = pd.DataFrame(rows).astype({"t": float, "iteration": int, "ctx_requests": int, "ctx_tokens": int,
                                    "gen_requests": int, "gen_tokens": int, "elapsed_ms": float})
    df["elapsed_s"] = df.pop("elapsed_ms") / 1000.0
    return df.rename(columns={"t": "t_unix"})[COLUMNS].sort_values("t_unix", kind="stable").reset_index(drop=True)
