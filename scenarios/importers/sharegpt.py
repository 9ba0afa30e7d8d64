"""ShareGPT / LMSYS-style conversations (a JSON list of ``{id, conversations: [{from, value}]}``): lengths from
the model's own tokenizer, arrivals drawn (the data has no times).

- ``max_turns`` 1 (default): ``vllm bench serve``'s selection — the first human message and the reply after it,
  conversations with fewer than two messages skipped, pairs dropped when the prompt or the reply has fewer than
  4 tokens, the prompt more than 1,024 or both more than 2,048 (``vllm/benchmarks/datasets``, ShareGPT).
- ``max_turns`` > 1: every human → reply pair up to that many is a turn (as AIPerf reads the file); a turn's
  prompt is the whole history before it plus its own message, so each turn reuses the last one's prompt and
  reply as its prefix, and it is issued when the previous turn completes (no think time is recorded).
- Conversations arrive as a Poisson process at ``rate`` per second, seeded. Token counts are of the messages'
  text without special tokens or chat template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from scenarios.importers.rows import Row, TraceImportError

VLLM_FILTER = {"min_tokens": 4, "max_prompt": 1024, "max_total": 2048}


def _tokenizer(path: str | None) -> Any:
    if not path:
        raise TraceImportError("--tokenizer", None, "the sharegpt format needs the model's tokenizer directory "
                               "(a tokenizer.json) to count tokens: give --tokenizer DIR")
    from tokenizers import Tokenizer
    f = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
    if not f.is_file():
        raise TraceImportError(path, None, "no tokenizer.json there: expected a tokenizer directory or file")
    return Tokenizer.from_file(str(f))


def _pairs(path: Path, k: int, conv: Any) -> list[tuple[str, str]]:
    msgs = conv.get("conversations") if isinstance(conv, dict) else None
    if not isinstance(msgs, list) or not all(isinstance(m, dict) and isinstance(m.get("value"), str) for m in msgs):
        raise TraceImportError(path, k, "entry lacks 'conversations': expected a list of {from, value} messages")
    out = []
    for a, b in zip(msgs[0::2], msgs[1::2], strict=False):
        if a.get("from") not in ("human", "user") or b.get("from") not in ("gpt", "assistant", "chatgpt"):
            break
        out.append((a["value"], b["value"]))
    return out


def read_sharegpt(path: Path, tokenizer: str | None, rate: float | None, seed: int, max_turns: int) -> list[Row]:
    if rate is None or not rate > 0:
        raise TraceImportError(path, None, "the sharegpt format has no arrival times: give --rate R (conversations "
                               "per second, Poisson) with R > 0")
    tok = _tokenizer(tokenizer)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TraceImportError(path, e.lineno, f"not JSON ({e.msg})") from None
    if not isinstance(data, list):
        raise TraceImportError(path, None, "expected a JSON list of conversations")
    count = lambda text: len(tok.encode(text, add_special_tokens=False).ids)   # noqa: E731
    convs: list[tuple[int, list[tuple[int, int]]]] = []
    for k, conv in enumerate(data, 1):
        pairs = [(count(q), count(r)) for q, r in _pairs(path, k, conv)[:max_turns]]
        if max_turns == 1:
            f = VLLM_FILTER
            pairs = [(q, r) for q, r in pairs if q >= f["min_tokens"] and r >= f["min_tokens"]
                     and q <= f["max_prompt"] and q + r <= f["max_total"]]
        pairs = [(q, r) for q, r in pairs if q > 0 and r > 0]
        if pairs:
            convs.append((k, pairs))
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(convs))
    starts = np.cumsum(gaps) - gaps[0] if len(convs) else gaps
    rows: list[Row] = []
    key = 0
    for (k, pairs), t in zip(convs, starts.tolist(), strict=True):
        history: list[tuple[int, int]] = []
        for j, (q, r) in enumerate(pairs):
            blocks = history + [(2 * key, q)]
            rows.append(Row(k, t, sum(n for _, n in blocks), r, tuple(blocks), key=key,
                            parent=key - 1 if j else None, gap_s=0.0 if j else None))
            history = blocks + [(2 * key + 1, r)]
            key += 1
    rows.sort(key=lambda r: (r.t_s, r.key))
    return rows
