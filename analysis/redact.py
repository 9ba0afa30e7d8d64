"""One redaction step for everything servetwin writes or prints that came from an engine or a user's URL.

Engine configurations are captured from start-up logs (SGLang's ``ServerArgs(...)``, vLLM's "non-default args"),
from server-info endpoints (``/get_server_info``) and from launch commands; any of them can carry an API key,
a token or a password, and an endpoint URL can carry credentials. ``redact`` replaces:

- the value of every mapping key that names a secret (``api_key``, ``admin_api_key``, ``hf_token``, ``token``,
  ``password``, ``secret``, ``authorization``, ``credentials`` …; not ``max_tokens`` or ``tokenizer``);
- in strings: credentials in URLs (``https://user:pass@host`` → ``https://***@host``), ``Bearer …`` values,
  ``--api-key VALUE`` / ``--api-key=VALUE`` and ``api_key='…'`` / ``"api_key": "…"`` pairs, and ``sk-…`` keys;
- in argument lists: the element after a secret-naming flag.

A secret that was set is shown as ``<redacted>`` (so a reader still sees that one was set); an unset one stays
as it was (``None``, empty).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "<redacted>"
_WORD = r"(?:api[_-]?keys?|[a-z0-9]*[_-]?password|passwd|secret|client[_-]?secret|authorization|credentials?|" \
        r"(?:[a-z0-9]+[_-])?token|bearer|private[_-]?key)"
_KEY = re.compile(rf"^(?:[a-z0-9]+[_-])*{_WORD}$", re.IGNORECASE)
_FLAG = re.compile(rf"^--?{_WORD}$", re.IGNORECASE)
_TEXT_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"([a-z][a-z0-9+.-]*://)[^/\s@:'\"]*:[^/\s@'\"]*@", re.IGNORECASE), rf"\1{MASK}@"),
    (re.compile(r"([a-z][a-z0-9+.-]*://)[^/\s@:'\"]+@", re.IGNORECASE), rf"\1{MASK}@"),
    (re.compile(r"(\bbearer\s+)[^\s'\",]+", re.IGNORECASE), rf"\1{MASK}"),
    (re.compile(rf"(--?{_WORD}(?:=|\s+))(?!{MASK})[^\s'\",]+", re.IGNORECASE), rf"\1{MASK}"),
    (re.compile(rf"(\b(?:[a-z0-9]+[_-])*{_WORD}['\"]?\s*[=:]\s*)(['\"])(?!{MASK})(?!\2)[^'\"]*\2", re.IGNORECASE),
     rf"\1\2{MASK}\2"),
    (re.compile(rf"(\b(?:[a-z0-9]+[_-])*{_WORD}['\"]?\s*[=:]\s*)\[[^\]]*\]", re.IGNORECASE), rf"\1['{MASK}']"),
    (re.compile(rf"(\b(?:[a-z0-9]+[_-])*{_WORD}\s*=\s*)(?!{MASK}|None\b|['\"])[^\s,)'\"]+", re.IGNORECASE),
     rf"\1{MASK}"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"), MASK),
)


def is_secret_key(key: str) -> bool:
    """Whether a configuration key names a secret (its last dotted part: ``arg.api_key`` is vLLM's flag)."""
    return bool(_KEY.match(key.strip().rsplit(".", 1)[-1]))


def redact_text(text: str) -> str:
    for rule, repl in _TEXT_RULES:
        text = rule.sub(repl, text)
    return text


def _masked(value: Any) -> Any:
    return value if value in (None, "", [], {}, False) else MASK


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (JSON-like: mappings, lists, strings, numbers) with every secret replaced."""
    if isinstance(obj, dict):
        return {k: _masked(v) if isinstance(k, str) and is_secret_key(k) else redact(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        out = [redact(v) for v in obj]
        for i in range(len(out) - 1):
            if isinstance(obj[i], str) and _FLAG.match(obj[i]) and isinstance(obj[i + 1], str):
                out[i + 1] = MASK
        return out if isinstance(obj, list) else tuple(out)
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
