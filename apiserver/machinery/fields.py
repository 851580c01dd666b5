"""The kinds of field a Kubernetes-style schema is declared with (marshmallow fields carrying their
description, JSON type, required-ness and value rules), and the walks every schema shares: validation
into Kubernetes ``StatusCause``\\ s, the unknown-field walk of a strict decoder, pruning, and the
definitions OpenAPI publishes. :mod:`apiserver.apis.schema` declares the VirtualCluster with them."""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate

from apiserver.machinery.errors import (
    FIELD_VALUE_DUPLICATE,
    FIELD_VALUE_INVALID,
    FIELD_VALUE_NOT_SUPPORTED,
    FIELD_VALUE_REQUIRED,
    FIELD_VALUE_TYPE_INVALID,
    Cause,
)
from apiserver.machinery.golang import MAX_INT64, MIN_INT64, go_bad_value, parse_duration
from apiserver.machinery.quantity import QuantityError, parse_quantity
from apiserver.machinery.selectors import label_key_errors
from apiserver.machinery.validation import (
    OMIT_VALUE,
    dns1123_subdomain_errors,
    duplicate_value,
    field_error,
    invalid_value,
    label_map_errors,
    not_supported_value,
)

# Names of referenced apimachinery definitions, as kube-openapi publishes them.
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
QUANTITY_REF = "io.k8s.apimachinery.pkg.api.resource.Quantity"
TIME_REF = f"{META}.Time"
FIELDS_V1_REF = f"{META}.FieldsV1"
RAW_EXTENSION_REF = "io.k8s.apimachinery.pkg.runtime.RawExtension"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (MIN_INT64, MAX_INT64)


# --------------------------------------------------------------------------- causes


@dataclass(frozen=True)
class Problem:
    """A ``field.Error`` before its path is known; raised inside marshmallow, rendered later."""

    type: str
    detail: str = ""
    value: Any = OMIT_VALUE
    supported: tuple[str, ...] = ()
    expected_type: str = ""
    in_body: str = ""  # a CRD schema's own wording, after "<path> in body "

    def cause(self, path: str) -> Cause:
        """The cause at ``path``, its message rendered by :mod:`apiserver.machinery.validation` as ``ErrorBody`` does.
        Type and bound errors are worded as a CRD's schema validation words them (the JSON type
        received is the bad value of a ``FieldValueTypeInvalid``)."""
        if self.expected_type:
            return field_error(FIELD_VALUE_TYPE_INVALID, path, self.value,
                               f"{path} in body must be of type {self.expected_type}: {go_bad_value(self.value)}")
        if self.in_body:
            return invalid_value(path, self.value, f"{path} in body {self.in_body}")
        if self.type == FIELD_VALUE_NOT_SUPPORTED:
            return not_supported_value(path, self.value, self.supported)
        if self.type == FIELD_VALUE_DUPLICATE:
            return duplicate_value(path, self.value)
        return field_error(self.type, path, self.value, self.detail)


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value, as used in type errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def fail(*problems: Problem) -> ValidationError:
    """Wrap problems for marshmallow, which wants a list of messages."""
    return ValidationError(list(problems))


def _invalid(value: Any, detail: str) -> ValidationError:
    return fail(Problem(FIELD_VALUE_INVALID, detail, value))


def _wrong_type(expected: str, value: Any) -> ValidationError:
    return fail(Problem(FIELD_VALUE_INVALID, value=json_type(value), expected_type=expected))


# --------------------------------------------------------------------------- kube value checks
# Each returns kube's messages (empty when valid). DNS names, label keys and label values are checked
# by apiserver.machinery.validation and apiserver.machinery.selectors; only the checks particular to this schema live here.

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def qualified_name_errors(value: str) -> list[str]:
    """``IsQualifiedName`` (label keys, condition types, resource names): :func:`label_key_errors`."""
    return label_key_errors(value)


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def host_errors(value: str) -> list[str]:
    """An address that clients dial and certificates name: an IP or a DNS-1123 subdomain."""
    if _is_ip(value) or not dns1123_subdomain_errors(value):
        return []
    return ["must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff) or a lowercase RFC 1123 "
            "subdomain (e.g. 'example.com')"]


def optional_host_errors(value: str) -> list[str]:
    """``externalIP: ""`` is how Kosmos spells "no external IP"."""
    return host_errors(value) if value else []


def cidr_errors(value: str) -> list[str]:
    try:
        ok = "/" in value and bool(ipaddress.ip_network(value, strict=False))
    except ValueError:
        ok = False
    return [] if ok else ["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]


def optional_subdomain_errors(value: str) -> list[str]:
    return dns1123_subdomain_errors(value) if value else []


def quantity_errors(value: Any, *, minimum: str = "nonnegative") -> list[str]:
    """Parse a Quantity given as JSON number or string; ``minimum`` is nonnegative or positive."""
    text = value.strip() if isinstance(value, str) else str(value)
    try:
        amount = parse_quantity(text)
    except QuantityError as err:
        return [str(err)]
    if minimum == "positive" and amount <= 0:
        return ["must be greater than zero"]
    if amount < 0:
        return ["must be greater than or equal to 0"]
    return []


# --------------------------------------------------------------------------- validators


class Range(validate.Range):
    """Inclusive bounds, published as OpenAPI minimum/maximum and worded as a CRD's schema
    validation words them (the lower bound checked first)."""

    def __call__(self, value: Any) -> Any:
        if self.min is not None and value < self.min:
            raise fail(Problem(FIELD_VALUE_INVALID, value=value, in_body=f"should be greater than or equal to {self.min}"))
        if self.max is not None and value > self.max:
            raise fail(Problem(FIELD_VALUE_INVALID, value=value, in_body=f"should be less than or equal to {self.max}"))
        return value

    def detail(self) -> str:
        if self.min is not None and self.max is not None:
            return f"must be between {self.min} and {self.max}, inclusive"
        if self.min is not None:
            return f"must be greater than or equal to {self.min}"
        return f"must be less than or equal to {self.max}"


class OneOf(validate.OneOf):
    """An enum: ``FieldValueNotSupported`` listing the choices; OpenAPI publishes them as enum."""

    def __call__(self, value: Any) -> Any:
        if value not in self.choices:
            raise fail(Problem(FIELD_VALUE_NOT_SUPPORTED, value=value, supported=tuple(self.choices)))
        return value


class Check(validate.Validator):
    """A kube ``IsX``-style check: ``fn`` returns messages, each becomes a FieldValueInvalid cause."""

    error = None

    def __init__(self, fn: Callable[[Any], list[str]], *, format: str | None = None) -> None:
        self.fn = fn
        self.format = format  # an OpenAPI "format" hint, e.g. "cidr"

    def __call__(self, value: Any) -> Any:
        messages = self.fn(value)
        if messages:
            raise fail(*(Problem(FIELD_VALUE_INVALID, m, value) for m in messages))
        return value


class Unique(validate.Validator):
    """No two list items share ``key(item)``; duplicates are reported at ``[i]`` (+ ``sub`` field)."""

    error = None

    def __init__(self, key: Callable[[Any], Any] = lambda item: item, sub: str = "") -> None:
        self.key = key
        self.sub = sub

    def __call__(self, items: list[Any]) -> list[Any]:
        seen: set[Any] = set()
        errors: dict[int, Any] = {}
        for index, item in enumerate(items):
            value = self.key(item)
            if value is None:
                continue
            if value in seen:
                problem = [Problem(FIELD_VALUE_DUPLICATE, value=value)]
                errors[index] = {self.sub: problem} if self.sub else problem
            seen.add(value)
        if errors:
            raise ValidationError(errors)
        return items


DEFAULT = "default"  # the metadata key of a field's default (see KubeField.options)
LIST_TYPE = "x-kubernetes-list-type"
LIST_MAP_KEYS = "x-kubernetes-list-map-keys"
MAP_TYPE = "x-kubernetes-map-type"


def merge_extensions(fld: fields.Field) -> dict[str, Any]:
    """The merge structure a field declares, as the OpenAPI extensions that publish it: the one
    declaration behind :func:`list_type`, :func:`map_type`, both OpenAPI documents
    (:mod:`apiserver.endpoints.openapi`) and the CRD derived from the schema (``bench/crd.py``).

    A list's type is declared on the field (``metadata={LIST_TYPE: ...}``, as ObjectMeta's
    finalizers and ownerReferences are), or else read from its :class:`Unique` validator: unique
    scalars are a set, items unique by a sub-field a map keyed by it; a list declaring neither is
    atomic and publishes nothing, as kube omits the default. A map's or struct's type is published
    only where declared (``metadata={MAP_TYPE: "atomic"}``)."""
    out: dict[str, Any] = {}
    declared = fld.metadata.get(LIST_TYPE)
    if declared:
        out[LIST_TYPE] = declared
        if declared == "map":
            out[LIST_MAP_KEYS] = list(fld.metadata.get(LIST_MAP_KEYS, ()))
    elif isinstance(fld, fields.List):
        for validator in fld.validators:
            if isinstance(validator, Unique):
                out[LIST_TYPE] = "map" if validator.sub else "set"
                if validator.sub:
                    out[LIST_MAP_KEYS] = [validator.sub]
                break
    map_type = fld.metadata.get(MAP_TYPE)
    if map_type:
        out[MAP_TYPE] = map_type
    return out


def struct_extensions(cls: type[Schema]) -> dict[str, Any]:
    """The merge structure a named object type declares for itself (``MAP_TYPE``), as the
    extension its OpenAPI definition publishes."""
    declared = getattr(cls, "MAP_TYPE", None)
    return {MAP_TYPE: declared} if declared else {}


def struct_type(cls: type[Schema]) -> str:
    """How a struct merges (:func:`struct_extensions`): ``granular`` unless declared ``atomic``."""
    return struct_extensions(cls).get(MAP_TYPE, "granular")


def list_type(fld: fields.Field) -> tuple[str, tuple[str, ...]]:
    """How a list field merges (:func:`merge_extensions`): ``("atomic", ())``, ``("set", ())`` or
    ``("map", keys)``. Field management splits objects by it (:mod:`apiserver.machinery.fieldpath`)."""
    declared = merge_extensions(fld)
    return declared.get(LIST_TYPE, "atomic"), tuple(declared.get(LIST_MAP_KEYS, ()))


def map_type(fld: fields.Field) -> str:
    """How a map or struct merges (:func:`merge_extensions`): ``granular`` unless declared ``atomic``."""
    return merge_extensions(fld).get(MAP_TYPE, "granular")


def _label_map_errors(labels: dict[str, str]) -> list[Problem]:
    """Kube reports bad label keys and values at the map itself, not at ``[key]``."""
    return [Problem(FIELD_VALUE_INVALID, msg, bad)
            for bad, msg in label_map_errors(labels)]


def check_label_map(labels: dict[str, str]) -> dict[str, str]:
    problems = _label_map_errors(labels)
    if problems:
        raise fail(*problems)
    return labels


# --------------------------------------------------------------------------- field kinds


class KubeField(fields.Field):
    """Base of every field here: Problem-valued messages, null means absent unless required."""

    default_error_messages = {
        "required": [Problem(FIELD_VALUE_REQUIRED)],
        "null": [Problem(FIELD_VALUE_REQUIRED)],
    }

    @staticmethod
    def options(description: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """marshmallow's options from ours: ``default=`` is the value a structural schema's
        defaulting gives the field when its object is present without it (:func:`prune`), and
        what OpenAPI publishes as ``default``."""
        kwargs.setdefault("allow_none", not kwargs.get("required", False))
        metadata = {**kwargs.get("metadata", {}), "description": description}
        if "default" in kwargs:
            metadata[DEFAULT] = kwargs.pop("default")
        kwargs["metadata"] = metadata
        return kwargs


def _enum_bad_value(value: Any, nested: bool = False) -> Any:
    """A non-string value as a CRD's enum check echoes it after the type error: objects (nested ones
    too) as ``{}``, integers beyond int64 as the float64 they decode to, and inside an array whole
    numbers as Go's JSON writes them (``1``, not ``1.0``)."""
    if isinstance(value, Mapping):
        return {}
    if isinstance(value, list | tuple):
        return [_enum_bad_value(v, nested=True) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not MIN_INT64 <= value <= MAX_INT64:
        value = float(value)
    if nested and isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


class Str(KubeField, fields.String):
    def __init__(self, description: str = "", **kwargs: Any) -> None:
        super().__init__(**self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str):
            problems = [Problem(FIELD_VALUE_INVALID, value=json_type(value), expected_type="string")]
            # A CRD checks an enum whatever the type, so a value of the wrong type gets both causes.
            for validator in self.validators:
                if isinstance(validator, OneOf):
                    problems.append(Problem(FIELD_VALUE_NOT_SUPPORTED, value=_enum_bad_value(value),
                                            supported=tuple(validator.choices)))
            raise fail(*problems)
        return value


class Int(KubeField, fields.Integer):
    """A JSON integer (``1.0`` counts, as in kube's CRD validation) within int32/int64 bounds."""

    def __init__(self, description: str = "", *, format: str = "int32", **kwargs: Any) -> None:
        kwargs = self.options(description, kwargs)
        kwargs["metadata"]["format"] = format
        super().__init__(**kwargs)
        self.bounds = _INT32 if format == "int32" else _INT64

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong_type("integer", value)
        low, high = self.bounds
        if not low <= value <= high:
            raise _invalid(value, Range(low, high).detail())
        return value


class Bool(KubeField, fields.Boolean):
    def __init__(self, description: str = "", **kwargs: Any) -> None:
        super().__init__(**self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, bool):
            raise _wrong_type("boolean", value)
        return value


def duration_errors(value: str) -> list[str]:
    """A positive Go duration (``time.ParseDuration``); unparsable ones are type errors (:class:`Duration`)."""
    nanoseconds = parse_duration(value)
    return [] if nanoseconds is None or nanoseconds > 0 else ["must be a positive duration"]


class Duration(Str):
    """A metav1.Duration: a string Go's ``time.ParseDuration`` reads (``30m``, ``1h30m``, ``90s``),
    positive; published as a string of format ``duration``.

    Stricter than a CRD's ``format: duration`` (go-openapi's, which also takes ``1d`` and ``0s``):
    what is stored is what the reconciler acts on. A value that is not a string is refused as a CRD
    refuses it, by its format, naming Go's type of a JSON number (``int64``, ``float64``) and
    nothing for the rest."""

    def __init__(self, description: str = "", **kwargs: Any) -> None:
        kwargs["validate"] = [Check(duration_errors, format="duration"), *kwargs.get("validate", [])]
        super().__init__(description, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str):
            go_type = "" if isinstance(value, bool) else "int64" if isinstance(value, int) else \
                "float64" if isinstance(value, float) else ""
            raise fail(Problem(FIELD_VALUE_INVALID, value=go_type, expected_type="duration"))
        if parse_duration(value) is None:
            raise fail(Problem(FIELD_VALUE_INVALID, value=value, expected_type="duration"))
        return value


class Quantity(KubeField):
    """A resource.Quantity: a JSON number or a string such as ``"100Gi"``; kept as given."""

    REF = QUANTITY_REF

    def __init__(self, description: str = "", *, minimum: str = "nonnegative", **kwargs: Any) -> None:
        kwargs = self.options(description, kwargs)
        kwargs["validate"] = [Check(lambda v: quantity_errors(v, minimum=minimum)), *kwargs.get("validate", [])]
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _wrong_type("number,string", value)
        if isinstance(value, int) and not MIN_INT64 <= value <= MAX_INT64:  # stored objects hold int64 numbers only
            raise _invalid(value, "a quantity beyond 64 bits must be written as a string")
        return value


class Time(KubeField):
    """A metav1.Time: an RFC 3339 timestamp string."""

    REF = TIME_REF

    def __init__(self, description: str = "", **kwargs: Any) -> None:
        super().__init__(**self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str):
            raise _wrong_type("string", value)
        if not _RFC3339.fullmatch(value):
            raise fail(Problem(FIELD_VALUE_INVALID, value=value, expected_type="date-time"))
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise fail(Problem(FIELD_VALUE_INVALID, value=value, expected_type="date-time")) from None
        return value


class FreeObject(KubeField):
    """An opaque JSON object published under a named definition (FieldsV1, RawExtension)."""

    def __init__(self, ref: str, description: str = "", **kwargs: Any) -> None:
        super().__init__(**self.options(description, kwargs))
        self.REF = ref

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _wrong_type("object", value)
        return value


class Obj(KubeField, fields.Nested):
    """A nested object published as a ``$ref`` to its schema's definition."""

    def __init__(self, schema: type[KubeSchema], description: str = "", **kwargs: Any) -> None:
        super().__init__(schema, **self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _wrong_type("object", value)
        return super()._deserialize(value, attr, data, **kwargs)


class Array(KubeField, fields.List):
    def __init__(self, inner: fields.Field, description: str = "", **kwargs: Any) -> None:
        inner.allow_none = False  # a null element of a list of X is not an X: 422
        super().__init__(inner, **self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, list):
            raise _wrong_type("array", value)
        return super()._deserialize(value, attr, data, **kwargs)


class Map(KubeField, fields.Dict):
    """A JSON object with free keys (labels, resources); errors of one entry land at ``[key]``."""

    def __init__(self, values: fields.Field, description: str = "", *, keys: fields.Field | None = None,
                 **kwargs: Any) -> None:
        values.allow_none = False  # a null value in a map of strings (or quantities) is not one: 422
        super().__init__(keys=keys or Str(), values=values, **self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _wrong_type("object", value)
        return super()._deserialize(value, attr, data, **kwargs)


# --------------------------------------------------------------------------- schemas


class KubeSchema(Schema):
    """A named object type. Unknown keys are ignored here: :func:`unknown_fields` reports them."""

    OPENAPI_NAME: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    GVK: ClassVar[tuple[dict[str, str], ...]] = ()
    # ``x-kubernetes-map-type`` of the struct itself, published on its definition (kube's
    # ``+structType=atomic`` marker, as on OwnerReference): read through :func:`struct_type`.
    MAP_TYPE: ClassVar[str | None] = None

    class Meta:
        unknown = EXCLUDE


_FIELDS_BY_KEY: dict[type[Schema], dict[str, fields.Field]] = {}


def field_of(schema: Schema, name: str) -> fields.Field | None:
    """The field a JSON key maps to (honours ``data_key``)."""
    by_key = _FIELDS_BY_KEY.get(type(schema))
    if by_key is None:
        by_key = _FIELDS_BY_KEY[type(schema)] = {(fld.data_key or attr): fld for attr, fld in schema.fields.items()}
    return by_key.get(name)


def validate_with(schema: Schema, value: Any, path: str) -> list[Cause]:
    """Causes for everything wrong in ``value`` as ``schema`` declares it, at ``path``."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Problem(FIELD_VALUE_INVALID, value=json_type(value), expected_type="object").cause(path)]
    if accepts(schema, value):
        return []
    try:
        schema.load(value)
    except ValidationError as err:
        return _causes(err.messages, schema, path)
    return []


_REQUIRED: dict[type[Schema], tuple[str, ...] | None] = {}


def accepts(schema: Schema, value: Mapping[str, Any]) -> bool:
    """Whether loading ``value`` through ``schema`` raises nothing, decided by the same fields and
    validators without marshmallow's error bookkeeping (several times faster on the write path).

    False means "not sure": marshmallow then loads the value and explains what is wrong. Schemas
    with hooks (``@validates_schema``) are always left to marshmallow.
    """
    cls = type(schema)
    if cls not in _REQUIRED:
        field_of(schema, "")  # builds the key index
        hooked = any(schema._hooks.values())  # noqa: SLF001 (marshmallow's hook registry; a defaultdict)
        _REQUIRED[cls] = None if hooked else tuple(
            fld.data_key or attr for attr, fld in schema.fields.items() if fld.required)
    required = _REQUIRED[cls]
    if required is None or any(key not in value for key in required):
        return False
    by_key = _FIELDS_BY_KEY[cls]
    for key, sub in value.items():
        fld = by_key.get(key)
        if fld is not None and not _field_accepts(fld, sub, value):
            return False
    return True


_KINDS: dict[type[fields.Field], str] = {}


def _kind_of(fld: fields.Field) -> str:
    kind = _KINDS.get(type(fld))
    if kind is None:
        kind = _KINDS[type(fld)] = ("object" if isinstance(fld, Obj) else "array" if isinstance(fld, Array) else
                                    "map" if isinstance(fld, Map) else "leaf" if isinstance(fld, KubeField) else "")
    return kind


def _field_accepts(fld: fields.Field, value: Any, data: Mapping[str, Any]) -> bool:
    if value is None:
        return bool(fld.allow_none)
    kind = _kind_of(fld)
    try:
        if kind == "leaf":
            loaded = fld._deserialize(value, None, data)  # noqa: SLF001 (each kind's own type check)
        elif kind == "object":
            if type(value) is not dict or not accepts(fld.schema, value):
                return False
            loaded = value
        elif kind == "array":
            if type(value) is not list:
                return False
            inner = fld.inner  # type: ignore[attr-defined]
            for item in value:
                if not _field_accepts(inner, item, data):
                    return False
            loaded = value
        elif kind == "map":
            if type(value) is not dict:
                return False
            keys, values = fld.key_field, fld.value_field  # type: ignore[attr-defined]
            for k, v in value.items():
                if (keys is not None and not _field_accepts(keys, k, data)) or \
                        (values is not None and not _field_accepts(values, v, data)):
                    return False
            loaded = value
        else:
            return False
        for validator in fld.validators:
            if validator(loaded) is False:
                return False
        return True
    except Exception:  # whatever it is, marshmallow's load says it properly
        return False


def _causes(messages: Any, node: Schema | fields.Field | None, path: str) -> list[Cause]:
    """Turn marshmallow's error tree into causes, using the schema to name each level."""
    if isinstance(messages, Problem):
        return [messages.cause(path)]
    if isinstance(messages, str):
        return [Cause(FIELD_VALUE_INVALID, messages, path)]
    if isinstance(messages, list | tuple):
        return [c for m in messages for c in _causes(m, node, path)]
    if not isinstance(messages, Mapping):
        return [Cause(FIELD_VALUE_INVALID, str(messages), path)]
    if isinstance(node, fields.Nested):
        node = node.schema
    out: list[Cause] = []
    for key, sub in messages.items():
        if key == "_schema":  # errors about this level itself, merged with its children's
            out += _causes(sub, None, path)
        elif isinstance(node, Schema):
            out += _causes(sub, field_of(node, str(key)), _join(path, str(key)))
        elif isinstance(node, fields.List):
            out += _causes(sub, node.inner, f"{path}[{key}]")
        elif isinstance(node, fields.Dict) and isinstance(sub, Mapping):
            for part, part_node in (("key", node.key_field), ("value", node.value_field)):
                if part in sub:
                    out += _causes(sub[part], part_node, f"{path}[{key}]")
        else:
            out += _causes(sub, None, f"{path}[{key}]")
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


Unknown = tuple[dict[str, Any], str, str]  # (the dict holding it, its key, its path)


def _unknown_in_schema(schema: Schema, value: Any, path: str, normalize: bool = False) -> list[Unknown]:
    """What ``schema`` does not declare in ``value``; with ``normalize``, declared values are also put
    in their declared type on the way (one walk: it runs on every write)."""
    out: list[Unknown] = []
    _walk_schema(schema, value, path, out, normalize)
    return out


_DEFAULTS: dict[type[Schema], tuple[tuple[str, Any], ...]] = {}


def defaults_of(schema: Schema) -> tuple[tuple[str, Any], ...]:
    """(JSON key, default) of every field of ``schema`` that declares a default."""
    found = _DEFAULTS.get(type(schema))
    if found is None:
        found = _DEFAULTS[type(schema)] = tuple(
            (fld.data_key or attr, fld.metadata[DEFAULT]) for attr, fld in schema.fields.items()
            if DEFAULT in fld.metadata)
    return found


def _walk_schema(schema: Schema, value: Any, path: str, out: list[Unknown], normalize: bool) -> None:
    if not isinstance(value, dict):
        return
    if normalize:  # structural defaulting: a present object gets the defaults of the fields it lacks
        for key, default in defaults_of(schema):
            if value.get(key) is None:
                value[key] = copy.deepcopy(default)
    for key in list(value) if normalize else value:
        sub = value[key]
        fld = field_of(schema, str(key))
        if fld is None:
            out.append((value, key, _join(path, str(key))))
        elif sub is None:
            if normalize and fld.allow_none and not fld.required:
                del value[key]  # null is absent: kube prunes the nulls of non-nullable fields
        elif isinstance(sub, dict | list):
            _walk_field(fld, sub, _join(path, str(key)), out, normalize)
        elif normalize and type(sub) is float and isinstance(fld, fields.Integer) and sub.is_integer():
            value[key] = int(sub)  # stored as Go stores a whole float64: 100, not 100.0


def _walk_field(fld: fields.Field, value: Any, path: str, out: list[Unknown], normalize: bool) -> None:
    if isinstance(fld, fields.Nested):
        _walk_schema(fld.schema, value, path, out, normalize)
    elif isinstance(fld, fields.List) and isinstance(value, list):
        _walk_items(fld.inner, value, enumerate(value), path, out, normalize)
    elif isinstance(fld, fields.Dict) and isinstance(value, dict) and fld.value_field is not None:
        _walk_items(fld.value_field, value, list(value.items()), path, out, normalize)


def _walk_items(fld: fields.Field, holder: Any, items: Iterable[tuple[Any, Any]], path: str, out: list[Unknown],
                normalize: bool) -> None:
    for k, v in items:
        if isinstance(v, dict | list):
            _walk_field(fld, v, f"{path}[{k}]", out, normalize)
        elif normalize and type(v) is float and isinstance(fld, fields.Integer) and v.is_integer():
            holder[k] = int(v)


def iter_schemas(roots: Iterable[type[KubeSchema]]) -> list[type[KubeSchema]]:
    """Every schema class reachable from ``roots`` (for publishing their definitions), roots first."""
    found: list[type[KubeSchema]] = []
    pending = list(roots)
    while pending:
        cls = pending.pop(0)
        if cls in found:
            continue
        found.append(cls)
        pending += [type(s) for s in _nested_schemas(cls())]
    return found


def _nested_schemas(schema: Schema) -> list[Schema]:
    out: list[Schema] = []
    for fld in schema.fields.values():
        while isinstance(fld, fields.List | fields.Dict):
            fld = fld.inner if isinstance(fld, fields.List) else fld.value_field
        if isinstance(fld, fields.Nested):
            out.append(fld.schema)
    return out


def unknown_in(schema: Schema, obj: dict[str, Any]) -> list[str]:
    """Paths in ``obj`` that ``schema`` does not declare, in kube's format (``spec.foo``,
    ``spec.promotePolicies[0].bar``)."""
    return [path for _, _, path in _unknown_in_schema(schema, obj, "")]


def prune(schema: Schema, obj: dict[str, Any]) -> list[str]:
    """Drop, in place, what ``schema`` does not declare, store what it does in its declared type and
    fill in declared defaults (see :func:`apiserver.apis.schema.prune_unknown_fields`); returns the
    dropped paths."""
    found = _unknown_in_schema(schema, obj, "", normalize=True)
    for holder, key, _ in found:
        holder.pop(key, None)
    return [path for _, _, path in found]
