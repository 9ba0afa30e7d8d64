"""A real sglang-router (``python -m sglang_router.launch_router``, PyPI ``sglang-router`` 0.3.2) in front of local
engines, and what its debug log says about where each request went.

The router names the worker it sent a request to only in its debug log (``Sending request url=<worker>``,
tagged with the request's ``request_id``, which is the client's ``X-Request-Id`` when one is sent:
``../reference/routing.md``); ``worker_of`` reads that. Each engine's own prefix-cache counters
(``vllm:prefix_cache_hits_total`` / ``…_queries_total``) are read from its ``/metrics`` before and after a run.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from live.local_engine import ROOT, EngineError

ROUTER_PYTHON = ROOT / ".router-venv" / "bin" / "python"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SENT = re.compile(r'request_id="([^"]+)".*Sending request url=(\S+)')


@dataclass
class SglangRouter:
    """One router process; a context manager that starts it (healthy when its workers registered) and stops it."""

    workers: list[str]
    policy: str = "cache_aware"
    port: int = 30000
    log_path: Path = field(default_factory=lambda: Path("router.log"))
    prometheus_port: int = 29000
    extra: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [str(ROUTER_PYTHON), "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                str(self.port), "--worker-urls", *self.workers, "--policy", self.policy, "--log-level", "debug",
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.prometheus_port), *self.extra]

    def start(self, timeout_s: float = 60.0) -> SglangRouter:
        if not ROUTER_PYTHON.is_file():
            raise EngineError(f"sglang-router is not installed ({ROUTER_PYTHON} missing); run `make router`")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the process
        self._proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise EngineError(f"sglang-router exited with code {self._proc.returncode}; log: {self.log_path}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2.0).status_code == 200 and self._workers_ready():
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"sglang-router did not become ready within {timeout_s:.0f} s (log: {self.log_path})")

    def _workers_ready(self) -> bool:
        r = httpx.get(self.url + "/workers", timeout=2.0)
        return r.status_code == 200 and r.text.count("127.0.0.1") >= len(self.workers)

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> SglangRouter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def worker_of(log: str | Path, prefix: str) -> dict[int, str]:
    """Request index → the worker URL the router sent it to, for request ids ``PREFIX-<index>`` (the last
    sending wins where the router retried)."""
    out: dict[int, str] = {}
    head = prefix + "-"
    with open(log, errors="replace") as f:
        for line in f:
            if "Sending request" not in line:
                continue
            m = _SENT.search(_ANSI.sub("", line))
            if m and m.group(1).startswith(head):
                tail = m.group(1)[len(head):]
                if tail.isdigit():
                    out[int(tail)] = m.group(2).rstrip("/")
    return out


def prefix_counters(url: str) -> tuple[float, float]:
    """(prefix-cache hit tokens, queried tokens) as a vLLM server's /metrics reports them now."""
    text = httpx.get(url.rstrip("/") + "/metrics", timeout=5.0).text
    hits = queries = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries
