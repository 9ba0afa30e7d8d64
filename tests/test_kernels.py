"""The NumPy kernels agree with their pure-Python references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.kernels import (
    ROOT_HASH,
    chain_states,
    chain_states_constant,
    chain_states_py,
    common_prefix_at,
    common_prefix_len,
    common_prefix_len_py,
    token_bytes,
)

tokens = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=200).map(lambda x: np.asarray(x, dtype=np.int32))


@settings(max_examples=200, deadline=None)
@given(t=tokens, bs=st.integers(1, 40), parent=st.integers(0, 2**64 - 1))
def test_chain_states_agree(t, bs, parent):
    assert (chain_states(t, bs, parent) == chain_states_py(t, bs, parent)).all()


@settings(max_examples=100, deadline=None)
@given(t=tokens, bs=st.integers(1, 40), cut=st.integers(0, 10))
def test_a_chain_continues_from_its_last_state(t, bs, cut):
    whole = chain_states(t, bs)
    cut = min(cut, len(whole))
    parent = int(whole[cut - 1]) if cut else ROOT_HASH
    assert (chain_states(t[cut * bs:], bs, parent) == whole[cut:]).all()


@settings(max_examples=200, deadline=None)
@given(a=tokens, cut=st.integers(0, 250), tail=tokens)
def test_common_prefix_agree(a, cut, tail):
    b = np.concatenate([a[:cut], tail]).astype(np.int32)
    assert common_prefix_len(a, b) == common_prefix_len_py(a, b)


@settings(max_examples=300, deadline=None)
@given(a=tokens, head=tokens, cut=st.integers(0, 250), tail=tokens, wide=st.booleans())
def test_common_prefix_at_agrees(a, head, cut, tail, wide):
    """Of a and b[n:], from their bytes: a whole a is found by memcmp, a partial one counted; a key whose bytes do
    not compare as its tokens (int64) is counted."""
    b = np.concatenate([head, a[:cut], tail]).astype(np.int64 if wide else np.int32)
    n = len(head)
    ab = token_bytes(a)
    assert ab is not None and (token_bytes(b) is None) == wide
    assert common_prefix_at(a, ab, b, token_bytes(b), n) == common_prefix_len_py(a, b[n:])
    longer = np.concatenate([b, a]).astype(b.dtype)          # the bytes of a key that b only begins
    assert common_prefix_at(a, ab, b, token_bytes(longer), n) == common_prefix_len_py(a, b[n:])


def test_hash_chains_identify_whole_prefix():
    a = np.arange(64, dtype=np.int32)
    b = a.copy()
    b[3] = -1
    ha, hb = chain_states(a, 16), chain_states(b, 16)
    assert (ha != hb).all()          # a change in block 0 changes every later block's hash
    c = a.copy()
    c[40] = -1
    hc = chain_states(c, 16)
    assert (hc[:2] == ha[:2]).all() and (hc[2:] != ha[2:]).all()
    assert chain_states(a, 16, ROOT_HASH).dtype == np.uint64


@settings(max_examples=100, deadline=None)
@given(tok=st.integers(-(2**31), 2**31 - 1), bs=st.integers(1, 40), n=st.integers(0, 6),
       parent=st.integers(0, 2**64 - 1))
def test_a_run_of_one_token_in_closed_form(tok, bs, n, parent):
    ref = chain_states_py(np.full(n * bs, tok, dtype=np.int32), bs, parent)
    got = chain_states_constant(tok, bs, n, parent)
    assert got == ref.tolist()


@settings(max_examples=200, deadline=None)
@given(head=st.lists(st.integers(0, 50), min_size=0, max_size=90), tails=st.lists(
    st.lists(st.integers(0, 50), max_size=40), min_size=1, max_size=4), bs=st.integers(1, 17),
    grow=st.lists(st.integers(0, 12), min_size=1, max_size=4), data=st.data())
def test_block_hashes_from_a_shared_head_equal_a_fresh_chain(head, tails, bs, grow, data):
    """Prompts that start with one shared prefix take its block hashes from the head's memo: the same hashes,
    extended into generated tokens, as a request that hashes its whole prompt itself."""
    from simulator.request import Request, SharedHead
    shared = SharedHead(len(head))
    for i, tail in enumerate(tails):
        prompt = np.asarray(head + tail, dtype=np.int32)
        a = Request(i, 0, "worker", prompt, 64, 0.0, 0.0, i, head=shared)
        b = Request(i, 0, "worker", prompt, 64, 0.0, 0.0, i)
        n = data.draw(st.integers(0, len(prompt) // bs + 1))
        for extra in grow:
            a.output_len = b.output_len = min(a.output_len + extra, 64)
            n = min(n + extra // bs + 1, a.fill_len // bs)
            assert a.block_hashes(n, bs) == b.block_hashes(n, bs)
