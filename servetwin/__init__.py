"""servetwin: a discrete-event simulator of LLM serving engines plus a live validator."""

from typing import Any


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed distribution when first asked for (importlib.metadata costs a
    command's start-up ~25 ms otherwise)."""
    if name != "__version__":
        raise AttributeError(f"module 'servetwin' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("servetwin")
    except PackageNotFoundError:          # run from a checkout that is not installed
        return "0+unknown"
