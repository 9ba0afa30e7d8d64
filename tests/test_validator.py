"""Every validator check fires on a corrupted trace, naming the check (hypothesis over corruptions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import TraceError, compile_trace, validate_trace
from scenarios.trace import Trace, write_trace
from tests.conftest import small_scenario

TRACE = compile_trace(small_scenario(duration_s=60))


def _copy() -> Trace:
    return Trace(manifest=json.loads(json.dumps(TRACE.manifest)),
                 arrays={k: v.copy() for k, v in TRACE.arrays.items()})


def corrupt(kind: str, i: int) -> tuple[Trace, str]:
    t = _copy()
    a = t.arrays
    n = t.n_requests
    i = i % n
    if kind == "prefix-token":
        a["prefix"][i % a["prefix"].size] += 1
        return t, "prefix-sha256"
    if kind == "sigma":
        t.manifest["target_sharing"] = 0.5
        return t, "sharing"
    if kind == "duplicate-suffix":
        j = (i + 1) % n
        s_i, s_j = a["segments"][a["seg_offsets"][i + 1] - 1], a["segments"][a["seg_offsets"][j + 1] - 1]
        a["pool"][s_j[1]:s_j[1] + s_j[2]] = a["pool"][s_i[1]:s_i[1] + s_i[2]]
        return t, "distinct-suffix"
    if kind == "cycle":
        agg = int(np.flatnonzero(a["role"] == 2)[i % (a["role"] == 2).sum()])
        a["pred_index"][a["pred_offsets"][agg - 4]] = agg   # a worker now depends on its aggregator
        return t, "dag"
    if kind == "foreign-pred":
        agg = int(np.flatnonzero(a["role"] == 2)[-1])
        a["pred_index"][a["pred_offsets"][agg]] = 0 if a["dag"][agg] != 0 else agg + 100
        return t, "dag"
    if kind == "arrival-order":
        j = max(i, 6)
        a["arrival_s"][j:] = a["arrival_s"][j:] - 1000.0
        return t, "arrivals-ordered"
    if kind == "negative-delay":
        w = int(np.flatnonzero(a["role"] == 1)[i % (a["role"] == 1).sum()])
        a["delay_s"][w] = -0.5
        return t, "tool-delays"
    if kind == "huge-delay":
        w = int(np.flatnonzero(a["role"] == 1)[i % (a["role"] == 1).sum()])
        a["delay_s"][w] = 1e6
        return t, "tool-delays"
    raise AssertionError(kind)


KINDS = ["prefix-token", "sigma", "duplicate-suffix", "cycle", "foreign-pred", "arrival-order",
         "negative-delay", "huge-delay"]


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(KINDS), i=st.integers(0, 10_000))
def test_each_check_fires(kind, i):
    t, check = corrupt(kind, i)
    with pytest.raises(TraceError) as e:
        validate_trace(t)
    assert e.value.check == check


def test_clean_trace_passes():
    validate_trace(_copy())


@pytest.mark.parametrize("tamper", ["edit", "swap", "truncate", "manifest"])
def test_tampered_files_refused(tmp_path: Path, tamper):
    d = tmp_path / "t"
    write_trace(_copy(), d)
    if tamper == "edit":
        b = bytearray((d / "pool.npy").read_bytes())
        b[-3] ^= 0xFF
        (d / "pool.npy").write_bytes(bytes(b))
    elif tamper == "swap":
        (d / "delay_s.npy").write_bytes((d / "arrival_s.npy").read_bytes())
    elif tamper == "truncate":
        (d / "segments.npy").write_bytes((d / "segments.npy").read_bytes()[:100])
    else:
        (d / "manifest.json").write_text("{not json")
    with pytest.raises(TraceError) as e:
        validate_trace(d)
    assert e.value.check in ("digest", "manifest")


def _suffix_slice(t: Trace, i: int) -> slice:
    src, start, length = t.arrays["segments"][t.arrays["seg_offsets"][i + 1] - 1]
    return slice(int(start), int(start + length))


def test_suffixes_alike_in_their_lead_are_distinct_and_a_repeat_names_the_first():
    """The distinct-suffix check keys suffixes by their first tokens: suffixes that share those but differ later pass,
    and a repeat is named against the first request with that suffix, as comparing every pair would."""
    from scenarios.validate import FINGERPRINT
    t = _copy()
    pool = t.arrays["pool"]
    same = [i for i in range(t.n_requests) if _suffix_slice(t, i).stop - _suffix_slice(t, i).start
            == _suffix_slice(t, 0).stop - _suffix_slice(t, 0).start]
    assert len(same) >= 4
    a, b, c, d = same[:4]
    lead = pool[_suffix_slice(t, a)][:FINGERPRINT].copy()
    for i in (b, c, d):
        pool[_suffix_slice(t, i)][:FINGERPRINT] = lead          # the same lead, different tails: all distinct
    validate_trace(t)
    pool[_suffix_slice(t, d)] = pool[_suffix_slice(t, b)]       # d repeats b (not a, whose lead it shares)
    with pytest.raises(TraceError) as e:
        validate_trace(t)
    assert (e.value.check, e.value.request) == ("distinct-suffix", d) and f"request {b}" in str(e.value)


def test_a_segment_outside_its_array_is_refused_at_its_request():
    t = _copy()
    segs, off = t.arrays["segments"], t.arrays["seg_offsets"]
    k = int(off[3])                                             # request 3's first segment
    segs[k, 2] = t.arrays["pool"].size + t.arrays["prefix"].size + 1
    with pytest.raises(TraceError) as e:
        validate_trace(t)
    assert (e.value.check, e.value.request) == ("schema", 3) and f"segment {k} " in str(e.value)
