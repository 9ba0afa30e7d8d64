"""servetwin: a discrete-event simulator of LLM serving engines plus a live validator."""

__version__ = "0.1.0"
