"""What is run: scenario specs, the seeded trace compiler, the trace format and its validator."""

from foundation.errors import ServetwinError, SpecError, TraceError
from scenarios.compiler import compile_trace
from scenarios.spec import Scenario, load_scenario, scenario_from_dict
from scenarios.trace import Trace, read_trace, write_trace
from scenarios.validate import validate_trace

__all__ = ["Scenario", "ServetwinError", "SpecError", "Trace", "TraceError", "compile_trace",
           "load_scenario", "read_trace", "scenario_from_dict", "validate_trace", "write_trace"]
