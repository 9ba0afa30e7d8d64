"""Text prompts with exact token counts, for endpoints that take text.

Decoding token ids and re-encoding the text need not round-trip (merges change at boundaries), so each
segment is corrected iteratively until the tokenizer returns exactly the requested count: re-encode,
truncate when too long, append freshly drawn tokens when too short. The suffix is then corrected
against the prefix so that encode(prefix + suffix) has exactly F + D tokens and starts with the
prefix's own F tokens (no merge across the seam).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from foundation.errors import ServetwinError

MAX_ITER = 200


class TokenCountError(ServetwinError):
    pass


def load_tokenizer(path: str) -> Any:
    """A tokenizer from a local directory (no hub downloads)."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def _enc(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def _dec(tok: Any, ids: list[int]) -> str:
    return str(tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False))


_SAFE: dict[int, np.ndarray] = {}


def _ordinary_ids(tok: Any) -> np.ndarray:
    """Non-special ids that survive decode → encode on their own (byte fragments of multi-byte
    characters do not, and would never converge)."""
    key = id(tok)
    if key not in _SAFE:
        special = set(getattr(tok, "all_special_ids", []) or [])
        _SAFE[key] = np.asarray([i for i in range(len(tok)) if i not in special
                                 and _enc(tok, _dec(tok, [i])) == [i]], dtype=np.int64)
    return _SAFE[key]


def _safe(tok: Any, ids: list[int], rng: np.random.Generator) -> list[int]:
    pool = _ordinary_ids(tok)
    ok = set(pool.tolist())
    return [i if i in ok else int(pool[i % pool.size]) for i in ids]


def exact_segment(tok: Any, ids: list[int], n: int, rng: np.random.Generator) -> tuple[str, list[int]]:
    """Text whose encoding alone has exactly n tokens, starting from the given ids."""
    pool = _ordinary_ids(tok)
    cur = _safe(tok, list(ids[:n]), rng)
    seen: set[tuple[int, ...]] = set()
    for _ in range(MAX_ITER):
        text = _dec(tok, cur)
        enc = _enc(tok, text)
        if len(enc) == n:
            return text, enc
        if tuple(enc) in seen and enc:          # a cycle: redraw the last token
            enc[-1] = int(rng.choice(pool))
        seen.add(tuple(enc))
        cur = enc[:n] if len(enc) > n else enc + [int(x) for x in rng.choice(pool, size=n - len(enc))]
    raise TokenCountError(f"could not reach exactly {n} tokens after {MAX_ITER} corrections")


def exact_pair(tok: Any, prefix_ids: list[int], suffix_ids: list[int], rng: np.random.Generator,
               prefix: tuple[str, list[int]] | None = None) -> tuple[str, str]:
    """(prefix text, suffix text): the prefix alone encodes to F tokens and prefix+suffix to F + D with
    the prefix's tokens first. Pass a corrected ``prefix`` to reuse it across suffixes."""
    F, D = len(prefix_ids), len(suffix_ids)
    p_text, p_enc = prefix or exact_segment(tok, prefix_ids, F, rng)
    pool = _ordinary_ids(tok)
    cur = _safe(tok, list(suffix_ids), rng)
    seen: set[tuple[int, ...]] = set()
    for _ in range(MAX_ITER):
        s_text = _dec(tok, cur)
        enc = _enc(tok, p_text + s_text)
        if enc[:F] != p_enc:
            cur = [int(rng.choice(pool))] + cur[1:]      # a merge across the seam: change the first token
            continue
        got = len(enc) - F
        if got == D:
            return p_text, s_text
        tail = enc[F:]
        if tuple(tail) in seen and tail:
            tail[-1] = int(rng.choice(pool))
        seen.add(tuple(tail))
        cur = tail[:D] if got > D else tail + [int(x) for x in rng.choice(pool, size=D - got)]
    raise TokenCountError(f"could not make a suffix of exactly {D} tokens after the prefix")
