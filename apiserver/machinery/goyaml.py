"""YAML as kube-apiserver reads it (``sigs.k8s.io/yaml`` over go-yaml v2): YAML 1.1 scalars as go-yaml
resolves them (``y``, ``n``, ``on``, ``off`` are booleans; timestamps stay strings), converted to JSON,
and go-yaml's wording of what does not parse or repeats a key."""

from __future__ import annotations

from typing import Any

import orjson
import yaml

__all__ = ["YAMLError", "duplicate_keys", "to_json_document", "yaml_error"]

YAMLError = yaml.YAMLError


class _Loader(yaml.CSafeLoader):
    """go-yaml v2's resolution: its boolean words (PyYAML lacks ``y``/``n``) and no timestamps."""

    bool_values = {**yaml.constructor.SafeConstructor.bool_values, "y": True, "n": False}


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()}
for _first in "yYnN":
    _Loader.yaml_implicit_resolvers[_first] = [("tag:yaml.org,2002:bool", yaml.resolver.re.compile("^(?:y|Y|n|N)$")),
                                               *_Loader.yaml_implicit_resolvers.get(_first, [])]


def to_json_document(body: bytes) -> Any:
    """The first YAML document of ``body`` as JSON would hold it (``yaml.YAMLToJSON``); raises
    :class:`YAMLError` or :class:`TypeError` (what JSON cannot hold)."""
    document = yaml.load(body, Loader=_Loader)  # noqa: S506 - a safe loader
    return orjson.loads(orjson.dumps(document))


def yaml_error(e: Exception) -> str:
    """go-yaml's wording of a syntax error, as near as PyYAML's report allows."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        return f"yaml: line {e.problem_mark.line}: {e.problem}"
    return f"yaml: {e}"


def duplicate_keys(body: bytes) -> list[str]:
    """go-yaml's strict errors: ``line N: key "k" already set in map`` for each repeated key."""
    try:
        root = yaml.compose(body, Loader=_Loader)  # noqa: S506 - composing only
    except yaml.YAMLError:
        return []
    out: list[str] = []

    def walk(node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        out.append(f'line {key.start_mark.line + 1}: key "{key.value}" already set in map')
                    seen.add(key.value)
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)
    if root is not None:
        walk(root)
    return out
