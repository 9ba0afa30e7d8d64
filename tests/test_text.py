"""Text prompts with exact token counts, with a small BPE tokenizer trained here (no downloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios.text import exact_pair, exact_segment, load_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz .,;:!?'\n"), size=rng.integers(1, 9)))
             for _ in range(3000)]
    corpus = [" ".join(rng.choice(words, size=40)) for _ in range(400)]
    t = Tokenizer(models.BPE(unk_token=None))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>")
    d: Path = tmp_path_factory.mktemp("tok")
    fast.save_pretrained(d)
    return load_tokenizer(str(d))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 300))
def test_segment_count_exact(tok, seed, n):
    rng = np.random.default_rng(seed)
    ids = [int(x) for x in rng.integers(2, len(tok), size=n)]
    text, enc = exact_segment(tok, ids, n, rng)
    assert len(tok.encode(text, add_special_tokens=False)) == n


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), f=st.integers(1, 200), d=st.integers(1, 60))
def test_seam_exact(tok, seed, f, d):
    rng = np.random.default_rng(seed)
    p = [int(x) for x in rng.integers(2, len(tok), size=f)]
    s = [int(x) for x in rng.integers(2, len(tok), size=d)]
    pt, st_ = exact_pair(tok, p, s, rng)
    both = tok.encode(pt + st_, add_special_tokens=False)
    alone = tok.encode(pt, add_special_tokens=False)
    assert len(alone) == f and len(both) == f + d and both[:f] == alone
