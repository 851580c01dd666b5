"""Hand-built hostile bodies and what they are built from: JSON nested to any depth, a
VirtualCluster of an exact size, a value put or nulled at any path of an object, continue tokens of
any payload."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

from tests.support.client import dumps

__all__ = ["continue_token", "inside", "nested", "nulled", "paths_of", "sized", "with_value"]


def nested(depth: int, kind: str = "object") -> bytes:
    """A JSON value nested ``depth`` levels deep."""
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"[" * depth + b"]" * depth


def inside(field_json: bytes, name: str = "deep", namespace: str = "fuzz-deep", rv: str | None = None) -> bytes:
    """A VirtualCluster whose spec carries ``field_json`` (as an unknown field)."""
    meta = {"name": name, **({"resourceVersion": rv} if rv else {})}
    head = dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta})[:-1]
    return head + b',"spec":{"x":' + field_json + b"}}"


def sized(size: int, name: str, namespace: str, rv: str | None = None) -> bytes:
    """A valid VirtualCluster whose body is exactly ``size`` bytes (the bulk in spec.kubeconfig)."""
    meta: dict[str, Any] = {"name": name, **({"resourceVersion": rv} if rv else {})}
    empty = dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta,
                   "spec": {"kubeconfig": ""}})
    body = dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta,
                  "spec": {"kubeconfig": "k" * (size - len(empty))}})
    assert len(body) == size
    return body


def with_value(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``obj`` with ``value`` at ``path`` (containers created as needed)."""
    out = copy.deepcopy(obj)
    node = out
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, list):
            while len(node) <= key:
                node.append({})
            node = node[key]
            continue
        if key not in node or not isinstance(node[key], dict | list):
            node[key] = [] if isinstance(nxt, int) else {}
        node = node[key]
    if isinstance(node, list):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = value
    return out


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a field or element of a JSON value (containers included)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from paths_of(child, (*prefix, key))


def nulled(obj: Any, path: tuple[Any, ...]) -> Any:
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = None
    return out


def continue_token(payload: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
