"""YAML files as the project reads them: UTF-8 text, PyYAML's safe loader (libyaml's where built), a key named twice
in one mapping refused, and any problem one SpecError naming the file, line and column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from foundation.errors import SpecError


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's parser where built: 5× faster), refusing a mapping that names one key
    twice (PyYAML keeps the last silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        if isinstance(key, list | dict):
            continue                      # unhashable keys: the mapping constructor refuses them itself
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text → Python data; any problem is one SpecError naming where (line, column) and why."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        why = " ".join(str(getattr(err, "problem", None) or err).split())
        raise SpecError(f"{where}: invalid YAML{at}: {why}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as err:   # e.g. a timestamp out of range
        raise SpecError(f"{where}: invalid YAML value: {' '.join(str(err).split())}") from None


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file's contents, or one SpecError saying why it cannot be read as text."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: {what} not found" if not p.exists() else f"{p}: is not a regular file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{p}: not UTF-8 text (byte {err.start}); a {what} is a YAML text file") from None
    except OSError as err:
        raise SpecError(f"{p}: cannot be read ({err.strerror})") from None


def load_yaml(path: str | Path, what: str = "file") -> Any:
    return parse_yaml(read_text(path, what), str(path))
