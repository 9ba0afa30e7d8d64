"""What is run: scenario specs, the seeded trace compiler, the trace format and its validator.

The names below are imported when first used, so reading or validating a trace (``scenarios.trace``,
``scenarios.validate``) does not build the scenario models or load the compiler."""

from typing import TYPE_CHECKING

from foundation.errors import ServetwinError, SpecError, TraceError

if TYPE_CHECKING:
    from scenarios.compiler import compile_trace
    from scenarios.spec import Scenario, load_scenario, scenario_from_dict
    from scenarios.trace import Trace, read_trace, write_trace
    from scenarios.validate import validate_trace

__all__ = ["Scenario", "ServetwinError", "SpecError", "Trace", "TraceError", "compile_trace",
           "load_scenario", "read_trace", "scenario_from_dict", "validate_trace", "write_trace"]


def __getattr__(name: str) -> object:
    if name == "compile_trace":
        from scenarios.compiler import compile_trace
        return compile_trace
    if name in ("Scenario", "load_scenario", "scenario_from_dict"):
        from scenarios import spec
        return getattr(spec, name)
    if name in ("Trace", "read_trace", "write_trace"):
        from scenarios import trace
        return getattr(trace, name)
    if name == "validate_trace":
        from scenarios.validate import validate_trace
        return validate_trace
    raise AttributeError(f"module 'scenarios' has no attribute {name!r}")
