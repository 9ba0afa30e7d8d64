"""A real engine on this machine: vLLM's CPU build in its own virtual environment (``make engine``),
serving a tiny random-weight Llama with a locally trained tokenizer.

    python -m live.local_engine --port 8000 [--no-enable-prefix-caching] [--enable-chunked-prefill
                                --max-num-batched-tokens N] [--block-size 32] [--scheduling-policy fcfs] [--kv-gib 1]
    python -m live.local_engine --engine sglang [--schedule-policy lpm] [--chunked-prefill-size N]

Starts the OpenAI server, waits for health, prints the URL and the log path, stops cleanly on Ctrl-C.
The engine's Python is ``$SERVETWIN_ENGINE_PYTHON`` or ``.engine-venv/bin/python`` in the repository.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx

from foundation.errors import ServetwinError
from live.vllm_steplog import logging_config

ROOT = Path(__file__).resolve().parent.parent


class EngineError(ServetwinError):
    pass


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_python() -> Path:
    p = Path(os.environ.get("SERVETWIN_ENGINE_PYTHON", ROOT / ".engine-venv" / "bin" / "python"))
    if not p.exists():
        raise EngineError(f"no engine Python at {p}: run `make engine` (or set SERVETWIN_ENGINE_PYTHON)")
    return p


def tiny_model(out: Path, layers: int = 4, hidden: int = 256, vocab: int = 4096, context: int = 8192) -> Path:
    """Generate (once) the tiny model and tokenizer with the engine's Python."""
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    subprocess.run([str(engine_python()), str(ROOT / "live" / "tiny_model.py"), str(out), "--layers", str(layers),
                    "--hidden", str(hidden), "--vocab", str(vocab), "--context", str(context)],
                   check=True, capture_output=True)
    return out


@dataclass
class LocalEngine:
    """One local engine server on this machine: its process, health, pause and stop. Subclasses say how the
    engine is launched, in the engine's own argument names (``VllmCpu``, ``SglangCpu``)."""

    model_dir: Path
    port: int = 8000
    max_model_len: int = 8192
    log_path: Path = field(default_factory=lambda: Path("engine.log"))
    extra: list[str] = field(default_factory=list)
    step_log: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None
    _paused: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The engine's process id while it runs (its workers are its children)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def expected(self) -> dict[str, object]:
        """What this configuration means to test, in the resolved configuration's words."""
        raise NotImplementedError

    def start(self, timeout_s: float = 600.0) -> Self:
        env = self.env()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the process
        self._proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise EngineError(f"{type(self).__name__} exited with code {self._proc.returncode} during start-up; "
                                  f"log tail:\n{tail}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"{type(self).__name__} did not become healthy within {timeout_s:.0f} s "
                          f"(log: {self.log_path})")

    def pause(self) -> None:
        """Stop every process of the instance (SIGSTOP to its process group) so that it takes no CPU while
        another instance serves; its memory, caches and port stay. ``resume`` continues it."""
        if self.pid is not None:
            os.killpg(self.pid, signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """Continue a paused instance (SIGCONT to its process group); nothing where it is not paused."""
        if self.pid is not None and self._paused:
            os.killpg(self.pid, signal.SIGCONT)
        self._paused = False

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self.resume()                         # a stopped process group would take SIGINT only once continued
        os.killpg(self._proc.pid, signal.SIGINT)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def kill(self) -> None:
        """Kill abruptly (to test a server dying mid-run)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class VllmCpu(LocalEngine):
    """vLLM's CPU build serving the tiny model, configured by vLLM's own argument names."""

    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = False
    max_num_batched_tokens: int | None = None   # chunked prefill's token budget (None: vLLM's default)
    block_size: int = 32
    scheduling_policy: str = "fcfs"
    kv_gib: int = 1                   # VLLM_CPU_KVCACHE_SPACE: the KV cache's GiB on the CPU
    log_path: Path = field(default_factory=lambda: Path("vllm-engine.log"))
    step_log: Path | None = None      # every iteration's batch and forward time to this file (live.vllm_steplog)
    cpus: str | None = None           # the cores its OpenMP threads are bound to (VLLM_CPU_OMP_THREADS_BIND, "0")

    def argv(self) -> list[str]:
        a = [str(engine_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
             "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", str(self.max_model_len),
             "--block-size", str(self.block_size), "--scheduling-policy", self.scheduling_policy,
             "--dtype", "bfloat16", "--served-model-name", "tiny-llama"]
        a.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        if self.enable_chunked_prefill:
            a.append("--enable-chunked-prefill")
            if self.max_num_batched_tokens:
                a += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        else:
            a += ["--no-enable-chunked-prefill", "--max-num-batched-tokens",
                  str(self.max_num_batched_tokens or self.max_model_len)]
        if self.step_log is not None:
            a.append("--enable-logging-iteration-details")
        return a + self.extra

    def expected(self) -> dict[str, object]:
        return {"enable_prefix_caching": self.enable_prefix_caching,
                "enable_chunked_prefill": self.enable_chunked_prefill, "block_size": self.block_size}

    def env(self) -> dict[str, str]:
        # dev mode: /reset_prefix_cache, so a run can start with an empty prefix cache (LiveOptions.cold_cache)
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_gib), "VLLM_LOGGING_LEVEL": "INFO",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_SERVER_DEV_MODE": "1"}
        if self.step_log is not None:
            env["VLLM_LOGGING_CONFIG_PATH"] = str(logging_config(self.step_log))
        if self.cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpus
        return env


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="start a local vLLM CPU (or SGLang CPU) server on a tiny random-weight "
                                 "Llama; knobs in the engine's own argument names")
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model-dir", default=str(ROOT / ".engine-venv" / "tiny-llama"))
    ap.add_argument("--log", default="vllm-engine.log")
    ap.add_argument("--step-log", default=None, help="SGLang: log its scheduler's forwards to STEP_LOG.<pid>; "
                    "vLLM: every iteration's batch and forward time to STEP_LOG")
    v = ap.add_argument_group("vLLM")
    v.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    v.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=False)
    v.add_argument("--max-num-batched-tokens", type=int, default=None)
    v.add_argument("--block-size", type=int, default=32)
    v.add_argument("--scheduling-policy", default="fcfs", help="fcfs|priority")
    v.add_argument("--kv-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE")
    v.add_argument("--cpus", default=None, help="bind its OpenMP threads to these cores, e.g. 0 or 0-1 "
                   "(VLLM_CPU_OMP_THREADS_BIND; default: vLLM's own choice)")
    g = ap.add_argument_group("SGLang")
    g.add_argument("--schedule-policy", default="lpm", help="lpm|fcfs|…")
    g.add_argument("--chunked-prefill-size", type=int, default=None, help="default: SGLang's resolved one")
    g.add_argument("--disable-radix-cache", action="store_true")
    g.add_argument("--max-total-tokens", type=int, default=65536, help="the KV pool's cap")
    a = ap.parse_args(argv)
    model = tiny_model(Path(a.model_dir))
    step_log = Path(a.step_log) if a.step_log else None
    eng: LocalEngine
    if a.engine == "sglang":
        eng = SglangCpu(model, a.port, log_path=Path(a.log), step_log=step_log, schedule_policy=a.schedule_policy,
                        chunked_prefill_size=a.chunked_prefill_size, disable_radix_cache=a.disable_radix_cache,
                        max_total_tokens=a.max_total_tokens)
    else:
        eng = VllmCpu(model, a.port, log_path=Path(a.log), step_log=step_log,
                      enable_prefix_caching=a.enable_prefix_caching, enable_chunked_prefill=a.enable_chunked_prefill,
                      max_num_batched_tokens=a.max_num_batched_tokens, block_size=a.block_size,
                      scheduling_policy=a.scheduling_policy, kv_gib=a.kv_gib, cpus=a.cpus)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)            # stop the engine as Ctrl-C does (kill, a service manager)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # a background job starts with SIGINT ignored
    try:
        eng.start()
        print(f"{a.engine} (CPU) serving tiny-llama at {eng.url} (log: {eng.log_path}); Ctrl-C or SIGTERM stops "
              "it", flush=True)
        while eng._proc is not None and eng._proc.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        eng.stop()
    return 0



def sglang_python() -> Path:
    p = Path(os.environ.get("SERVETWIN_SGLANG_PYTHON", ROOT / ".engine-sglang" / "bin" / "python"))
    if not p.exists():
        raise EngineError(f"no SGLang engine Python at {p}: run `make engine-sglang` (or set SERVETWIN_SGLANG_PYTHON)")
    return p


@dataclass
class SglangCpu(LocalEngine):
    """SGLang 0.5.23 on its CPU path (torch_native attention, page size 1) serving the same tiny model,
    configured by SGLang's own argument names: ``chunked_prefill_size`` None keeps SGLang's resolved default,
    ``disable_radix_cache`` turns the prefix cache off, ``max_total_tokens`` caps the KV pool (otherwise it
    reserves most of RAM)."""

    schedule_policy: str = "lpm"
    chunked_prefill_size: int | None = None
    disable_radix_cache: bool = False
    max_total_tokens: int = 65536
    log_path: Path = field(default_factory=lambda: Path("sglang-engine.log"))
    step_log: Path | None = None      # a file prefix: the scheduler's forwards logged (live/sglang_cpu/steplog)

    def argv(self) -> list[str]:
        a = [str(sglang_python()), "-m", "sglang.launch_server", "--model-path", str(self.model_dir), "--device", "cpu",
             "--host", "127.0.0.1", "--port", str(self.port), "--schedule-policy", self.schedule_policy,
             "--enable-cache-report", "--enable-metrics", "--max-total-tokens", str(self.max_total_tokens),
             "--context-length", str(self.max_model_len), "--served-model-name", "tiny-llama"]
        if self.chunked_prefill_size:
            a += ["--chunked-prefill-size", str(self.chunked_prefill_size)]
        if self.disable_radix_cache:
            a.append("--disable-radix-cache")
        return a + self.extra

    def env(self) -> dict[str, str]:
        env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "PYTHONPATH": str(ROOT / "live" / "sglang_cpu")}
        if self.step_log is not None:
            env["PYTHONPATH"] = f"{ROOT / 'live' / 'sglang_cpu' / 'steplog'}{os.pathsep}{env['PYTHONPATH']}"
            env["SERVETWIN_SGLANG_STEPLOG"] = str(Path(self.step_log).resolve())
        return env

    def expected(self) -> dict[str, object]:
        exp: dict[str, object] = {"schedule_policy": self.schedule_policy, "max_total_tokens": self.max_total_tokens}
        if self.chunked_prefill_size:
            exp["chunked_prefill_size"] = self.chunked_prefill_size
        return exp


if __name__ == "__main__":
    sys.exit(main())
