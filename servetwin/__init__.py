"""servetwin: a discrete-event simulator of LLM serving engines plus a live validator."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("servetwin")
except PackageNotFoundError:          # run from a checkout that is not installed
    __version__ = "0+unknown"
