"""A simulation collects garbage less often (simulator/gc_window.py): the caller's thresholds come back, a process
that switched collections off keeps them off, and when collections happen does not change a result."""

import gc

import pandas as pd

from scenarios import compile_trace
from simulator import simulate
from simulator.gc_window import YOUNG, fewer_collections
from tests.conftest import small_scenario


def test_thresholds_are_raised_for_the_run_and_given_back():
    old = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_collections():
            assert gc.get_threshold() == (YOUNG, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0, 10, 10)                 # switched off: stays off
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
        gc.set_threshold(700, 10, 10)
        try:
            with fewer_collections():
                raise KeyError("x")
        except KeyError:
            pass
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*old)


def test_a_run_does_not_depend_on_when_collections_happen():
    trace = compile_trace(small_scenario(duration_s=60, arrivals={"rate": 1.0}))
    old = gc.get_threshold()
    try:
        a = simulate(trace, "sglang-0.4.1")
        gc.set_threshold(0)                         # no automatic collection at all during the run
        b = simulate(trace, "sglang-0.4.1")
    finally:
        gc.set_threshold(*old)
    pd.testing.assert_frame_equal(pd.DataFrame(a.requests), pd.DataFrame(b.requests))
    pd.testing.assert_frame_equal(pd.DataFrame(a.telemetry), pd.DataFrame(b.telemetry))
