"""Field sets: which fields of an object a write touched, as server-side apply records them
(sigs.k8s.io/structured-merge-diff ``fieldpath`` and ``typed``), and their FieldsV1 encoding.

A path is a tuple of serialized path elements, exactly as FieldsV1 spells them: ``f:<name>`` (a
struct field or map key), ``k:<json>`` (a map-list item, the compact JSON of its key fields sorted
by name), ``v:<json>`` (a set item) and ``i:<n>`` (a list index, never produced here but read). A
field set is a Python ``set`` of such paths, so union, difference and intersection are set algebra.

How an object is split into paths comes from its type (:class:`Type`), derived once from the
schema's field kinds (:func:`type_of`): nested schemas are structs, ``Map`` fields granular maps,
``Array`` fields lists whose relationship is :func:`apiserver.machinery.fields.list_type`
(atomic unless declared a set or a map keyed by fields), everything else a scalar.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from marshmallow import Schema, fields

from apiserver.machinery.fields import Time, field_of, list_type, map_type, struct_type
from apiserver.machinery.golang import go_float
from apiserver.machinery.jsonutil import json_copy

__all__ = ["ATOMIC", "Comparison", "FieldsV1Error", "Path", "Type", "TypingError", "compare", "ensure_named",
           "from_fields_v1", "prune", "to_fields_v1", "type_errors", "type_of", "without_prefixes"]

Path = tuple[str, ...]

SCALAR, STRUCT, MAP, LIST = "scalar", "struct", "map", "list"


class TypingError(ValueError):
    """An object cannot be split into paths by its type (a map-list item that is not an object)."""


class FieldsV1Error(ValueError):
    """A FieldsV1 document that does not decode (a value that is not an object, bad JSON after ``k:``)."""


@dataclass
class Type:
    """One node of the schema as field management sees it."""

    kind: str = SCALAR
    fields: dict[str, Type] = field(default_factory=dict)  # struct
    elem: Type | None = None  # map values, list items
    relationship: str = "atomic"  # list: atomic | set | map; map: granular | atomic
    keys: tuple[str, ...] = ()  # list of relationship map
    scalar: str = ""  # a scalar's type: string | numeric | boolean; "" accepts any value


ATOMIC = Type()

_TYPES: dict[type[Schema], Type] = {}


def type_of(schema: type[Schema]) -> Type:
    """The struct type a schema declares (cached; recursive schemas are not used by kube objects)."""
    found = _TYPES.get(schema)
    if found is None:
        found = _TYPES[schema] = Type(STRUCT)
        instance = schema()
        field_of(instance, "")  # builds the key index
        found.fields = {(fld.data_key or attr): _field_type(fld) for attr, fld in instance.fields.items()}
    return found


def _field_type(fld: fields.Field) -> Type:
    if isinstance(fld, fields.Nested):
        nested = type(fld.schema)
        return ATOMIC if struct_type(nested) == "atomic" else type_of(nested)
    if isinstance(fld, fields.List):
        relationship, keys = list_type(fld)
        return Type(LIST, elem=_field_type(fld.inner), relationship=relationship, keys=keys)
    if isinstance(fld, fields.Dict):
        value = fld.value_field
        return Type(MAP, elem=_field_type(value) if value is not None else ATOMIC,
                    relationship=map_type(fld))
    if isinstance(fld, fields.Boolean):
        return _BOOLEAN
    if isinstance(fld, fields.Number):
        return _NUMERIC
    if isinstance(fld, fields.String | Time):
        return _STRING
    return ATOMIC


_STRING, _NUMERIC, _BOOLEAN = Type(scalar="string"), Type(scalar="numeric"), Type(scalar="boolean")


# --------------------------------------------------------------------------- type checks


def type_errors(value: Any, t: Type, path: str = "") -> list[str]:
    """What keeps ``value`` from typing as ``t``, as structured-merge-diff's validating walk words it
    (``.spec.x: expected string, got &value.valueUnstructured{Value:true}``); null is of any type.
    Fields a struct does not declare are not reported here (pruning finds them)."""
    if value is None:
        return []
    if t.kind == SCALAR:
        if t.scalar == "string" and not isinstance(value, str):
            return [f"{path}: expected string, got {_go_value(value, sharp=True)}"]
        if t.scalar == "numeric" and (isinstance(value, bool) or not isinstance(value, int | float)):
            return [f"{path}: expected numeric (int or float), got {_go_type(value)}"]
        if t.scalar == "boolean" and not isinstance(value, bool):
            return [f"{path}: expected boolean, got {_go_value(value)}"]
        return []
    if t.kind == LIST:
        if not isinstance(value, list):
            return [f"{path}: expected list, got {_go_value(value)}"]
        out = []
        for i, item in enumerate(value):
            try:
                pe = f"[{i}]" if t.relationship == "atomic" else _path_element(_item_element(t, item))
            except TypingError as e:
                return [f"{path}: element {i}: {e}"]
            out += type_errors(item, t.elem or ATOMIC, path + pe)
        return out
    if not isinstance(value, dict):
        return [f"{path}: expected map, got {_go_value(value)}"]
    out = []
    for key, item in value.items():
        sub = t.fields.get(key) if t.kind == STRUCT else t.elem
        if sub is not None:
            out += type_errors(item, sub, f"{path}.{key}")
    return out


def _path_element(pe: str) -> str:
    """A set or keyed-list item's path element as SMD prints it (``[="a"]``, ``[name="a"]``)."""
    kind, rest = pe[0], pe[2:]
    if kind == "v":
        return f"[={rest}]"
    key = json.loads(rest)
    return "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(key.items())) + "]"


def _go_type(value: Any) -> str:
    return {bool: "bool", str: "string", dict: "map[string]interface {}", list: "[]interface {}",
            float: "float64"}.get(type(value), "int64")


def _go_v(value: Any, sharp: bool) -> str:
    """Go's ``%v`` (or ``%#v``) of a decoded JSON value held in an ``interface{}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value) if sharp else value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, list):
        items = [_go_v(v, sharp) for v in value]
        return "[]interface {}{" + ", ".join(items) + "}" if sharp else "[" + " ".join(items) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        if sharp:
            return "map[string]interface {}{" + ", ".join(f"{json.dumps(k)}:{_go_v(v, True)}" for k, v in items) + "}"
        return "map[" + " ".join(f"{k}:{_go_v(v, False)}" for k, v in items) + "]"
    return "<nil>"


def _go_value(value: Any, sharp: bool = False) -> str:
    """How SMD prints a ``value.Value`` holding ``value`` (``%v``: ``&{x}``; ``%#v``:
    ``&value.valueUnstructured{Value:x}``)."""
    if sharp:
        return "&value.valueUnstructured{Value:" + _go_v(value, True) + "}"
    return "&{" + _go_v(value, False) + "}"


# --------------------------------------------------------------------------- path elements


def go_json(value: Any) -> str:
    """Compact JSON as Go's encoder writes it: sorted keys, HTML-escaped, UTF-8 kept."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _item_element(t: Type, item: Any) -> str:
    if t.relationship == "set":
        if isinstance(item, dict | list):
            raise TypingError("only scalar values may be items of a set")
        return "v:" + go_json(item)
    if not isinstance(item, dict):
        raise TypingError("associative list with keys may not have non-map elements")
    key = {name: item[name] for name in t.keys if name in item}
    if not key:
        raise TypingError(f"associative list item has none of the keys {list(t.keys)}")
    return "k:" + go_json(key)


# --------------------------------------------------------------------------- comparison

_MISSING: Any = object()


def _equal(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``; ``1`` is ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    return bool(a == b)


@dataclass
class Comparison:
    """What changed from one object to the next (``typed.Comparison``)."""

    added: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)

    def without_prefixes(self, prefixes: Iterable[Path]) -> Comparison:
        prefixes = tuple(prefixes)
        return Comparison(without_prefixes(self.added, prefixes), without_prefixes(self.modified, prefixes),
                          without_prefixes(self.removed, prefixes))


def compare(lhs: Any, rhs: Any, t: Type) -> Comparison:
    """The paths added, modified and removed from ``lhs`` to ``rhs``: leaves (scalars, atomic lists
    and maps, empty containers) by value; structs, granular maps, granular lists and their items
    when they appear or disappear."""
    out = Comparison()
    _compare(lhs, rhs, t, (), out)
    return out


def _leaf(lhs: Any, rhs: Any, path: Path, out: Comparison) -> None:
    if lhs is _MISSING:
        out.added.add(path)
    elif rhs is _MISSING:
        out.removed.add(path)
    elif not _equal(lhs, rhs):
        out.modified.add(path)


def _container(value: Any, expected: type) -> Any:
    """The container a value holds for its type, None for null/absent, _MISSING on a type mismatch."""
    if value is _MISSING or value is None:
        return None
    return value if isinstance(value, expected) else _MISSING


def _same_json(lhs: Any, rhs: Any) -> bool:
    """Whether two containers encode to the same JSON bytes, which makes them equal leaf by leaf
    (orjson writes ``1`` and ``1.0``, ``true`` and ``1`` apart). Equal documents whose keys are in
    another order are not the same here: the walk compares those."""
    try:
        return orjson.dumps(lhs) == orjson.dumps(rhs)
    except orjson.JSONEncodeError:  # integers beyond 64 bits: the walk decides
        return False


def _compare(lhs: Any, rhs: Any, t: Type, path: Path, out: Comparison) -> None:
    if t.kind == SCALAR or (t.kind == LIST and t.relationship == "atomic") or \
            (t.kind == MAP and t.relationship == "atomic"):
        _leaf(lhs, rhs, path, out)
        return
    if isinstance(lhs, dict | list) and type(lhs) is type(rhs) and (lhs is rhs or _same_json(lhs, rhs)):
        return  # an unchanged subtree (most of an object in a write) has nothing to report
    expected = list if t.kind == LIST else dict
    lc, rc = _container(lhs, expected), _container(rhs, expected)
    if lc is _MISSING or rc is _MISSING:  # not of its declared type: validation says so; here a leaf
        _leaf(lhs, rhs, path, out)
        return
    if not lc and not rc:  # both empty or absent: a leaf, keeping the empty/null distinction
        _leaf(lhs, rhs, path, out)
        return
    if t.kind == LIST:
        left, right = _index(t, lc), _index(t, rc)
        elem = t.elem or ATOMIC
        for pe, item in left.items():
            _compare(item, right.get(pe, _MISSING), elem, (*path, pe), out)
        for pe, item in right.items():
            if pe not in left:
                _compare(_MISSING, item, elem, (*path, pe), out)
    else:
        lm, rm = lc or {}, rc or {}
        for key in lm.keys() | rm.keys():
            sub = t.fields.get(key) if t.kind == STRUCT else t.elem
            _compare(lm.get(key, _MISSING), rm.get(key, _MISSING), sub or ATOMIC, (*path, "f:" + key), out)
    if lhs is _MISSING:
        out.added.add(path)
    elif rhs is _MISSING:
        out.removed.add(path)


def _index(t: Type, items: list[Any] | None) -> dict[str, Any]:
    """A granular list's items by path element; a repeated item counts once (its first occurrence)."""
    out: dict[str, Any] = {}
    for item in items or ():
        out.setdefault(_item_element(t, item), item)
    return out


def without_prefixes(paths: set[Path], prefixes: Iterable[Path]) -> set[Path]:
    """``paths`` without those at or under any of ``prefixes`` (a reset-field filter)."""
    prefixes = tuple(prefixes)
    if not prefixes:
        return set(paths)
    return {p for p in paths if not any(p[:len(pre)] == pre for pre in prefixes)}


# --------------------------------------------------------------------------- FieldsV1


def to_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    """The FieldsV1 trie of a set: ``"."`` marks a member that also has children; keys sorted, as
    kube emits a custom resource's JSON."""
    root: dict[str, Any] = {}
    members: set[int] = set()
    for path in paths:
        node = root
        for pe in path:
            node = node.setdefault(pe, {})
        members.add(id(node))
    return _finish(root, members, top=True)


def _finish(node: dict[str, Any], members: set[int], top: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if node and id(node) in members and not top:
        out["."] = {}
    for key in sorted(node):
        out[key] = _finish(node[key], members)
    return out


_PREFIXES = ("f:", "k:", "v:", "i:")


def from_fields_v1(doc: Any) -> set[Path]:
    """The set a FieldsV1 document encodes (``FieldsToSet``): a node is a member when it says
    ``"."`` or has no children; elements of unknown kinds are dropped; anything malformed raises
    :class:`FieldsV1Error`."""
    if not isinstance(doc, Mapping):
        raise FieldsV1Error("FieldsV1 must be a JSON object")
    out: set[Path] = set()
    _read(doc, (), out)
    return out


def _read(node: Mapping[str, Any], path: Path, out: set[Path]) -> bool:
    """Collect ``node``'s members under ``path``; True when ``node`` itself is a member."""
    member, children = False, False
    for key, sub in node.items():
        if not isinstance(sub, Mapping):
            raise FieldsV1Error(f"the value of {key!r} must be an object")
        if key == ".":
            member = True
            continue
        pe = _canonical_element(key)
        if pe is None:
            continue
        children = True
        if _read(sub, (*path, pe), out):
            out.add((*path, pe))
    return member or not children


def _canonical_element(key: str) -> str | None:
    if len(key) < 2 or key[1] != ":":
        raise FieldsV1Error(f"missing colon: {key}")
    kind, rest = key[0], key[2:]
    if kind == "f":
        return key
    if kind == "i":
        try:
            return f"i:{int(rest)}"
        except ValueError:
            raise FieldsV1Error(f"bad index: {key}") from None
    if kind in "kv":
        try:
            value = json.loads(rest)
        except ValueError:
            raise FieldsV1Error(f"bad JSON in {key}") from None
        if kind == "k" and not isinstance(value, dict):
            raise FieldsV1Error(f"a key must be a JSON object: {key}")
        return f"{kind}:{go_json(value)}"
    return None


# --------------------------------------------------------------------------- apply: set, merge, prune


def _granular_list(t: Type) -> bool:
    return t.kind == LIST and t.relationship in ("set", "map")


def _atomic(t: Type) -> bool:
    return t.kind == SCALAR or (t.kind == LIST and not _granular_list(t)) or \
        (t.kind == MAP and t.relationship == "atomic")


def set_of(config: Any, t: Type, named: bool = False) -> set[Path]:
    """The paths an applied configuration sets (``typed.ToFieldSet``): every scalar leaf, atomic
    lists and maps whole, ``null`` and empty structs/maps as leaves; map entries and items of sets
    and keyed lists are members themselves; an empty granular list contributes nothing.

    ``named``: and, in the same walk, what :func:`ensure_named` would add (the declared struct
    fields on the way to a member), as pruning needs it."""
    out: set[Path] = set()
    _set_of(config, t, (), out, named)
    return out


def _set_of(value: Any, t: Type, path: Path, out: set[Path], named: bool) -> None:
    if _atomic(t) or value is None:
        if path:
            out.add(path)
        return
    if t.kind == LIST:
        if not isinstance(value, list):
            raise TypingError(f"{path_string(path)}: expected list")
        for item in value:
            pe = _item_element(t, item)
            out.add((*path, pe))
            _set_of(item, t.elem or ATOMIC, (*path, pe), out, named)
        return
    if not isinstance(value, dict):
        raise TypingError(f"{path_string(path)}: expected map")
    if not value:
        if path:
            out.add(path)
        return
    struct = t.kind == STRUCT
    for key, sub in value.items():
        child = (*path, "f:" + key)
        if not struct:
            out.add(child)
            _set_of(sub, t.elem or ATOMIC, child, out, named)
        elif (declared := t.fields.get(key)) is None:
            _set_of(sub, ATOMIC, child, out, named)
        elif named:
            before = len(out)
            _set_of(sub, declared, child, out, named)
            if len(out) > before:  # a member at or under it: the field is named on the way
                out.add(child)
        else:
            _set_of(sub, declared, child, out, named)


def merge(live: Any, config: Any, t: Type) -> Any:
    """``typed.Merge``: the configuration's values over the live object's; structs and granular
    maps merge key by key, sets and keyed lists item by item (order: live items keep their place,
    shared items follow the configuration, new ones go before the next shared one or at the end)."""
    if config is _MISSING:
        return live
    if live is _MISSING or live is None or config is None or _atomic(t):
        return json_copy(config)
    if t.kind == LIST:
        if not isinstance(live, list) or not isinstance(config, list):
            return json_copy(config)
        return _merge_list(live, config, t)
    if not isinstance(live, dict) or not isinstance(config, dict):
        return json_copy(config)
    out = dict(live)
    for key, sub in config.items():
        out[key] = merge(live.get(key, _MISSING), sub,
                         (t.fields.get(key) if t.kind == STRUCT else t.elem) or ATOMIC)
    return out


def _merge_list(live: list[Any], config: list[Any], t: Type) -> list[Any]:
    elem = t.elem or ATOMIC
    config_items = {_item_element(t, item): item for item in config}
    live_keys = [_item_element(t, item) for item in live]
    live_set = set(live_keys)
    # Config-only items go right before the next shared item following them in the config.
    pending: list[str] = []
    before: dict[str, list[str]] = {}
    for pe in config_items:
        if pe in live_set:
            before[pe] = pending
            pending = []
        else:
            pending.append(pe)
    out: list[Any] = []
    shared = [pe for pe in config_items if pe in live_set]
    shared_iter = iter(shared)
    live_by_pe = dict(zip(live_keys, live, strict=True))
    for pe in live_keys:
        if pe in config_items:
            nxt = next(shared_iter)
            for new in before[nxt]:
                out.append(json_copy(config_items[new]))
            out.append(merge(live_by_pe[nxt], config_items[nxt], elem))
        else:
            out.append(live_by_pe[pe])
    for new in pending:
        out.append(json_copy(config_items[new]))
    return out


def remove_paths(obj: Any, paths: Iterable[Path], t: Type) -> Any:
    """``obj`` without the values at ``paths`` (a new object; items of granular lists by element)."""
    obj = json_copy(obj)
    paths = set(paths)
    for path in paths:
        if not any(path[:depth] in paths for depth in range(1, len(path))):  # the outermost goes whole
            _remove(obj, path, t)
    return obj


def _remove(node: Any, path: Path, t: Type) -> None:
    *parents, last = path
    for pe in parents:
        if isinstance(node, dict) and pe.startswith("f:"):
            key = pe[2:]
            t = (t.fields.get(key) if t.kind == STRUCT else t.elem) or ATOMIC
            node = node.get(key)
        elif isinstance(node, list) and _granular_list(t):
            node = next((item for item in node if _item_element(t, item) == pe), None)
            t = t.elem or ATOMIC
        else:
            return
        if node is None:
            return
    if isinstance(node, dict) and last.startswith("f:"):
        node.pop(last[2:], None)
    elif isinstance(node, list) and _granular_list(t):
        node[:] = [item for item in node if _item_element(t, item) != last]


def _child(t: Type, pe: str) -> Type:
    if pe.startswith("f:") and t.kind == STRUCT:
        return t.fields.get(pe[2:]) or ATOMIC
    if (pe.startswith("f:") and t.kind == MAP) or (t.kind == LIST and not pe.startswith("f:")):
        return t.elem or ATOMIC
    return ATOMIC


def ensure_named(paths: Iterable[Path], t: Type) -> set[Path]:
    """``Set.EnsureNamedFieldsAreMembers``: the paths, and every field a struct declares on the way
    to one of them (not map keys, not list items)."""
    out = set(paths)
    for path in list(out):
        node = t
        for depth, pe in enumerate(path[:-1], start=1):
            if node.kind == STRUCT and pe.startswith("f:") and pe[2:] in node.fields:
                out.add(path[:depth])
            node = _child(node, pe)
    return out


def prune(merged: Any, last: set[Path], owned: set[Path], t: Type) -> Any:
    """``Updater.prune``: ``merged`` without what an applier applied last time (``last``) and no
    manager owns any more (``owned``: every manager's set, the applier's new one included).

    As structured-merge-diff does it, in three steps over sets whose struct fields on the way to a
    path count as members: everything ``last`` holds goes, subtrees whole; what some manager owns
    comes back; then of all that went, only the paths ``last`` itself holds stay gone, so a struct
    the applier owned comes back with the fields it holds that others own, and a map entry or list
    item it owned goes whole even if another manager owns a field inside it."""
    if not last:
        return merged
    last_named = ensure_named(last, t)
    merged_set = set_of(merged, t, named=True)
    pruned = remove_paths(merged, last_named, t)
    pruned = remove_paths(merged, merged_set - set_of(pruned, t, named=True) - ensure_named(owned, t), t)
    return remove_paths(merged, (merged_set - set_of(pruned, t, named=True)) & last_named, t)


def path_string(path: Path) -> str:
    """SMD's ``Path.String``: ``.spec.x``, ``[name="a"]`` for a keyed item, ``[="a"]`` for a set item."""
    out = []
    for pe in path:
        kind, rest = pe[0], pe[2:]
        if kind == "f":
            out.append("." + rest)
        elif kind == "k":
            key = json.loads(rest)
            out.append("[" + ",".join(f"{k}={go_json(v)}" for k, v in sorted(key.items())) + "]")
        elif kind == "v":
            out.append("[=" + go_json(json.loads(rest)) + "]")
        else:
            out.append(f"[{rest}]")
    return "".join(out)


def iteration_order(paths: Iterable[Path]) -> list[Path]:
    """SMD's ``Set.Iterate`` order: a node's members (sorted) before its children's subtrees."""
    out: list[Path] = []
    _iterate(sorted(set(paths)), (), out)
    return out


def _iterate(paths: list[Path], prefix: Path, out: list[Path]) -> None:
    depth = len(prefix)
    out.extend(p for p in paths if len(p) == depth + 1)
    children: dict[str, list[Path]] = {}
    for p in paths:
        if len(p) > depth + 1:
            children.setdefault(p[depth], []).append(p)
    for pe in sorted(children):
        _iterate(children[pe], (*prefix, pe), out)
