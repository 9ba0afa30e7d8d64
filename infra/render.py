"""A small kustomize-style renderer for this repository's manifests (no kustomize binary needed):
``resources`` (files or directories with a kustomization.yaml), ``commonLabels`` (added to every object's
labels and to pod-template labels) and ``patches`` with JSON 6902 operations (add, replace, remove).

    python infra/render.py infra/k8s/engines/vllm/overlays/matched     # prints the rendered YAML
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml


def _ptr(doc: Any, path: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.strip("/").split("/")]
    cur = doc
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    return cur, parts[-1]


def apply_op(doc: dict[str, Any], op: dict[str, Any]) -> None:
    parent, key = _ptr(doc, op["path"])
    kind = op["op"]
    if isinstance(parent, list):
        if kind == "add":
            parent.insert(len(parent) if key == "-" else int(key), op["value"])
        elif kind == "replace":
            parent[int(key)] = op["value"]
        elif kind == "remove":
            del parent[int(key)]
        else:
            raise ValueError(f"unsupported patch op {kind!r}")
    elif kind in ("add", "replace"):
        parent[key] = op["value"]
    elif kind == "remove":
        del parent[key]
    else:
        raise ValueError(f"unsupported patch op {kind!r}")


def _matches(doc: dict[str, Any], target: dict[str, Any]) -> bool:
    return all(doc.get("kind") == v if k == "kind" else doc.get("metadata", {}).get("name") == v
               for k, v in target.items() if k in ("kind", "name"))


def render(directory: str | Path) -> list[dict[str, Any]]:
    d = Path(directory)
    k = yaml.safe_load((d / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        p = d / res
        if p.is_dir():
            docs += render(p)
        else:
            docs += [x for x in yaml.safe_load_all(p.read_text()) if x]
    docs = copy.deepcopy(docs)
    for doc in docs:
        labels = k.get("commonLabels") or {}
        if labels:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            tmpl = doc.get("spec", {}).get("template")
            if isinstance(tmpl, dict):
                tmpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    for patch in k.get("patches", []):
        ops = yaml.safe_load(patch["patch"])
        for doc in docs:
            if _matches(doc, patch.get("target", {})):
                for op in ops:
                    apply_op(doc, op)
    return docs


if __name__ == "__main__":
    print(yaml.safe_dump_all(render(sys.argv[1]), sort_keys=False), end="")
