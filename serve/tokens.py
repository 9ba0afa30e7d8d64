"""Prompts in, filler out: what a served request's tokens are.

With the model's tokenizer (``--tokenizer DIR``) a text prompt is counted as the engine would count it: the
tokenizer's ids with its special tokens, a chat through its chat template. Without one, text is cut into pieces
of at most four characters (a word's leading space kept with it) and each piece is named by a hash — about
the four characters per token of English BPE vocabularies, and a shared text prefix gives a shared token
prefix, so prefix caching sees what the engines would see. Generated tokens carry no model: each is the same
filler text; lengths and timing are the simulator's.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np

FILLER = " x"
_PIECE = re.compile(r"\s?[^\s]{1,4}|\s+")


class PromptError(ValueError):
    """A request body the server refuses (HTTP 400, one line)."""


class Tokens:
    def __init__(self, vocab: int, tokenizer: str | Path | None = None):
        self.vocab = vocab
        self.tok: Any = None
        if tokenizer is not None:
            from transformers import AutoTokenizer
            self.tok = AutoTokenizer.from_pretrained(str(tokenizer))

    def text(self, text: str) -> np.ndarray:
        if self.tok is not None:
            return np.asarray(self.tok(text, add_special_tokens=True)["input_ids"], dtype=np.int32)
        ids = [self._piece_id(p) for p in _PIECE.findall(text)]
        return np.asarray(ids, dtype=np.int32)

    def _piece_id(self, piece: str) -> int:
        h = int.from_bytes(hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        return 256 + h % (self.vocab - 256)

    def ids(self, ids: list[Any]) -> np.ndarray:
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.vocab for i in ids):
            raise PromptError(f"prompt: token ids must be integers in [0, {self.vocab})")
        return np.asarray(ids, dtype=np.int32)

    def completion_prompt(self, prompt: Any) -> np.ndarray:
        """``prompt`` as /v1/completions takes it: a string or a list of token ids (one prompt per request)."""
        if isinstance(prompt, str):
            out = self.text(prompt)
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            return self.completion_prompt(prompt[0])
        elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
            out = self.ids(prompt)
        else:
            raise PromptError("prompt: expected a string or a list of token ids (one prompt per request)")
        if out.size == 0:
            raise PromptError("prompt: empty; expected at least one token")
        return out

    def chat_prompt(self, messages: Any) -> np.ndarray:
        if not isinstance(messages, list) or not messages:
            raise PromptError("messages: expected a non-empty list of {role, content} objects")
        msgs = [{"role": str(m.get("role", "user")), "content": _content(m)} for m in messages
                if isinstance(m, dict)]
        if len(msgs) != len(messages):
            raise PromptError("messages: every message must be an object with role and content")
        if self.tok is not None and getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):                    # newer transformers return a BatchEncoding
                ids = ids["input_ids"]
            return np.asarray(ids, dtype=np.int32)
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in msgs) + "<|assistant|>\n"
        return self.text(text)


def _content(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
    if c is None:
        return ""
    raise PromptError("messages: content must be a string or a list of text parts")
