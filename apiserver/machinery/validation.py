"""Name and ObjectMeta validation with kube's exact messages (apimachinery v0.35).

kubectl prints our 422 causes verbatim next to a Go apiserver's, so the texts and field
paths follow ``k8s.io/apimachinery/pkg/util/validation`` (DNS names),
``pkg/api/validation`` (ObjectMeta) and ``pkg/apis/meta/v1/validation`` (labels,
label selectors).  Label key/value rules come from :mod:`apiserver.machinery.selectors`.

Causes carry ``field.Error.ErrorBody()`` as the message (``Invalid value: "x": ...``),
which is what kube puts into ``details.causes``; :func:`apiserver.machinery.errors.invalid`
prefixes the field for the top-level message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apiserver.machinery.errors import (
    FIELD_VALUE_DUPLICATE,
    FIELD_VALUE_FORBIDDEN,
    FIELD_VALUE_INVALID,
    FIELD_VALUE_NOT_SUPPORTED,
    FIELD_VALUE_REQUIRED,
    FIELD_VALUE_TOO_LONG,
    FIELD_VALUE_TYPE_INVALID,
    Cause,
)
from apiserver.machinery.golang import byte_len, go_bad_value, go_quote
from apiserver.machinery.selectors import (
    DNS1123_LABEL_FMT,
    DNS1123_LABEL_MAX,
    DNS1123_LABEL_RE,
    DNS1123_SUBDOMAIN_ERR,
    DNS1123_SUBDOMAIN_FMT,
    DNS1123_SUBDOMAIN_MAX,
    DNS1123_SUBDOMAIN_RE,
    label_key_errors,
    label_value_errors,
    max_len_error,
    path_segment_name_errors,
    regex_error,
)

DNS1123_LABEL_ERR = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                     "and must start and end with an alphanumeric character")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
FINALIZER_ORPHAN = "orphan"
FINALIZER_FOREGROUND = "foregroundDeletion"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")  # metav1.LabelSelectorOperator

# ``ValidateNameFunc``: (name, is_generate_name_prefix) -> messages.
NameRule = Callable[[str, bool], list[str]]


def dns1123_label_errors(value: str) -> list[str]:
    """``validation.IsDNS1123Label`` (this package counts "characters", though it measures bytes)."""
    errs: list[str] = []
    if byte_len(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX, "characters"))
    if not DNS1123_LABEL_RE.fullmatch(value):
        if DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    """``validation.IsDNS1123Subdomain``: ≤ 253 and dot-separated DNS labels."""
    errs: list[str] = []
    if byte_len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX, "characters"))
    if not DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def _mask_trailing_dash(name: str) -> str:
    # kube's maskTrailingDash really drops two characters before appending "a"; kept as is.
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def name_is_dns_label(name: str, prefix: bool = False) -> list[str]:
    """``NameIsDNSLabel``; a generateName prefix may end in '-'."""
    return dns1123_label_errors(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_subdomain(name: str, prefix: bool = False) -> list[str]:
    """``NameIsDNSSubdomain`` (what CRD-served objects use)."""
    return dns1123_subdomain_errors(_mask_trailing_dash(name) if prefix else name)


def name_is_path_segment(name: str, prefix: bool = False) -> list[str]:
    """``ValidatePathSegmentName``: the floor every stored name must pass (URL- and key-safe)."""
    return path_segment_name_errors(name, prefix)


validate_namespace_name: NameRule = name_is_dns_label


# --- field.Error equivalents, rendered as causes --------------------------------------------

OMIT_VALUE = object()  # ``field.omitValue``: the body names the error type but shows no value.
_ERROR_TYPE_TEXT = {FIELD_VALUE_REQUIRED: "Required value", FIELD_VALUE_FORBIDDEN: "Forbidden",
                    FIELD_VALUE_TOO_LONG: "Too long", FIELD_VALUE_INVALID: "Invalid value",
                    FIELD_VALUE_TYPE_INVALID: "Invalid value", FIELD_VALUE_NOT_SUPPORTED: "Unsupported value",
                    FIELD_VALUE_DUPLICATE: "Duplicate value"}
_VALUELESS_TYPES = (FIELD_VALUE_REQUIRED, FIELD_VALUE_FORBIDDEN, FIELD_VALUE_TOO_LONG)


def field_error(type_: str, field: str, value: Any = OMIT_VALUE, detail: str = "") -> Cause:
    """A ``field.Error`` as a cause whose message is its ``ErrorBody()``."""
    body = _ERROR_TYPE_TEXT[type_]
    if type_ not in _VALUELESS_TYPES and value is not OMIT_VALUE:
        body += f": {go_bad_value(value)}"
    return Cause(type_, f"{body}: {detail}" if detail else body, field)


def invalid_value(field: str, value: Any, detail: str) -> Cause:
    """``field.Invalid``."""
    return field_error(FIELD_VALUE_INVALID, field, value, detail)


def required_value(field: str, detail: str = "") -> Cause:
    """``field.Required``."""
    return field_error(FIELD_VALUE_REQUIRED, field, detail=detail)


def forbidden_value(field: str, detail: str) -> Cause:
    """``field.Forbidden``."""
    return field_error(FIELD_VALUE_FORBIDDEN, field, detail=detail)


def not_supported_value(field: str, value: Any, supported: Sequence[str]) -> Cause:
    """``field.NotSupported``, listing the accepted values quoted as ``strconv.Quote`` does."""
    detail = "supported values: " + ", ".join(go_quote(str(v)) for v in supported) if supported else ""
    return field_error(FIELD_VALUE_NOT_SUPPORTED, field, value, detail)


def duplicate_value(field: str, value: Any) -> Cause:
    """``field.Duplicate``."""
    return field_error(FIELD_VALUE_DUPLICATE, field, value)


def too_long_value(field: str, max_bytes: int) -> Cause:
    """``field.TooLong`` (the value itself is never echoed)."""
    unit = "byte" if max_bytes == 1 else "bytes"
    return field_error(FIELD_VALUE_TOO_LONG, field, detail=f"may not be more than {max_bytes} {unit}")


def _type_invalid(field: str, value: Any, detail: str) -> Cause:
    return field_error(FIELD_VALUE_TYPE_INVALID, field, value, detail)


def _string_map(value: Any, field: str, causes: list[Cause]) -> dict[str, str]:
    """Labels/annotations as a str→str dict; a mistyped one becomes a cause, not a crash."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in value.items()):
        causes.append(_type_invalid(field, value, "must be a map of string to string"))
        return {}
    return dict(value)


# --- metadata pieces ---------------------------------------------------------------------------


def label_map_errors(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """``ValidateLabels`` without the path: (bad key or value, message) per broken rule, in kube's order."""
    errs: list[tuple[str, str]] = []
    for k, v in labels.items():
        errs.extend((k, msg) for msg in label_key_errors(k))
        errs.extend((v, msg) for msg in label_value_errors(v))
    return errs


def validate_labels(labels: Mapping[str, str] | None, field: str) -> list[Cause]:
    """``ValidateLabels``: every bad key and value is reported against the map's own path."""
    causes: list[Cause] = []
    items = _string_map(labels, field, causes)
    causes.extend(invalid_value(field, bad, msg) for bad, msg in label_map_errors(items))
    return causes


def validate_annotations(annotations: Mapping[str, str] | None, field: str) -> list[Cause]:
    """``ValidateAnnotations``: keys are label keys compared case-insensitively; total ≤ 256 KiB."""
    causes: list[Cause] = []
    items = _string_map(annotations, field, causes)
    for k in items:
        causes.extend(invalid_value(field, k, msg) for msg in label_key_errors(k.lower()))
    if sum(byte_len(k) + byte_len(v) for k, v in items.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(too_long_value(field, TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def validate_finalizers(finalizers: list[str] | None, field: str) -> list[Cause]:
    """``ValidateFinalizers``: qualified names, and not both orphan and foregroundDeletion."""
    causes: list[Cause] = []
    if finalizers is None:
        return causes
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        return [_type_invalid(field, finalizers, "must be a list of strings")]
    for f in finalizers:
        causes.extend(invalid_value(field, f, msg) for msg in label_key_errors(f))
    if FINALIZER_ORPHAN in finalizers and FINALIZER_FOREGROUND in finalizers:
        causes.append(invalid_value(field, finalizers, f"finalizer {FINALIZER_ORPHAN} and "
                                                       f"{FINALIZER_FOREGROUND} cannot be both set"))
    return causes


def _owner_ref_json(ref: Mapping[str, Any]) -> dict[str, Any]:
    """The OwnerReference as Go would marshal it (struct field order, omitempty pointers)."""
    out: dict[str, Any] = {k: ref.get(k, "") for k in ("apiVersion", "kind", "name", "uid")}
    for k in ("controller", "blockOwnerDeletion"):
        if ref.get(k) is not None:
            out[k] = ref[k]
    return out


def _api_version_parts(api_version: str) -> tuple[str, str]:
    """``schema.ParseGroupVersion`` → (group, version); unparsable gives empty parts."""
    if not api_version:
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return "", ""


def validate_owner_references(refs: list[Mapping[str, Any]] | None, field: str) -> list[Cause]:
    """``ValidateOwnerReferences``: required parts, no Event owners, at most one controller."""
    causes: list[Cause] = []
    if not refs:
        return causes
    if not isinstance(refs, list) or not all(isinstance(r, Mapping) for r in refs):
        return [_type_invalid(field, refs, "must be a list of owner references")]
    first_controller = ""
    for ref in refs:
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        group, version = _api_version_parts(api_version)
        if not version:
            causes.append(invalid_value(f"{field}.apiVersion", api_version, "version must not be empty"))
        if not kind:
            causes.append(invalid_value(f"{field}.kind", kind, "must not be empty"))
        if not ref.get("name"):
            causes.append(invalid_value(f"{field}.name", str(ref.get("name") or ""), "must not be empty"))
        if not ref.get("uid"):
            causes.append(invalid_value(f"{field}.uid", str(ref.get("uid") or ""), "must not be empty"))
        if (group, version, kind) == ("", "v1", "Event"):
            causes.append(invalid_value(field, _owner_ref_json(ref),
                                        "/v1, Kind=Event is disallowed from being an owner"))
        if ref.get("controller") is True:
            current = f"{kind}/{ref.get('name') or ''}"
            if first_controller:
                causes.append(invalid_value(
                    field, [_owner_ref_json(r) for r in refs],
                    "Only one reference can have Controller set to true. "
                    f'Found "true" in references for {first_controller} and {current}'))
            else:
                first_controller = current
    return causes


def selector_values_error(operator: str, values: Sequence[Any]) -> tuple[str, str] | None:
    """``ValidateLabelSelectorRequirement``'s operator/values rule: (cause type, detail) if broken."""
    if operator in ("In", "NotIn") and not values:
        return FIELD_VALUE_REQUIRED, "must be specified when `operator` is 'In' or 'NotIn'"
    if operator in ("Exists", "DoesNotExist") and values:
        return FIELD_VALUE_FORBIDDEN, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
    return None


def validate_label_selector(selector: Mapping[str, Any] | None, field: str) -> list[Cause]:
    """``ValidateLabelSelector`` (default options) for a metav1.LabelSelector in a spec."""
    causes: list[Cause] = []
    if selector is None:
        return causes
    causes.extend(validate_labels(selector.get("matchLabels"), f"{field}.matchLabels"))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        path = f"{field}.matchExpressions[{i}]"
        op, values = expr.get("operator", ""), expr.get("values") or []
        if op not in SELECTOR_OPERATORS:
            causes.append(invalid_value(f"{path}.operator", op, "not a valid selector operator"))
        elif problem := selector_values_error(op, values):
            causes.append(field_error(problem[0], f"{path}.values", detail=problem[1]))
        key = expr.get("key", "")
        causes.extend(invalid_value(f"{path}.key", key, msg) for msg in label_key_errors(key))
        for j, v in enumerate(values):
            causes.extend(invalid_value(f"{path}.values[{j}]", v, msg) for msg in label_value_errors(v))
    return causes


def validate_object_meta(meta: Mapping[str, Any], namespaced: bool, name_rule: NameRule = name_is_dns_label,
                         field: str = "metadata") -> list[Cause]:
    """``ValidateObjectMetaAccessor`` for a create: name, generateName, namespace, generation,
    labels, annotations, ownerReferences, finalizers — in kube's order.

    Unlike kube (which generates the name before validating) an empty name is accepted
    when ``generateName`` is set, so this may run before or after name generation.
    """
    causes: list[Cause] = [_type_invalid(f"{field}.{key}", meta[key], "must be a string")
                           for key in ("name", "generateName", "namespace")
                           if meta.get(key) is not None and not isinstance(meta[key], str)]
    if causes:  # the rules below are about strings
        return causes
    name = meta.get("name") or ""
    generate_name = meta.get("generateName") or ""
    if generate_name:
        causes.extend(invalid_value(f"{field}.generateName", generate_name, msg)
                      for msg in name_rule(generate_name, True))
    if name:
        causes.extend(invalid_value(f"{field}.name", name, msg) for msg in name_rule(name, False))
    elif not generate_name:
        causes.append(required_value(f"{field}.name", "name or generateName is required"))

    namespace = meta.get("namespace") or ""
    if namespaced:
        if not namespace:
            causes.append(required_value(f"{field}.namespace"))
        else:
            causes.extend(invalid_value(f"{field}.namespace", namespace, msg)
                          for msg in validate_namespace_name(namespace, False))
    elif namespace:
        causes.append(forbidden_value(f"{field}.namespace", "not allowed on this type"))

    generation = meta.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
        causes.append(invalid_value(f"{field}.generation", generation, "must be greater than or equal to 0"))
    causes.extend(validate_labels(meta.get("labels"), f"{field}.labels"))
    causes.extend(validate_annotations(meta.get("annotations"), f"{field}.annotations"))
    causes.extend(validate_owner_references(meta.get("ownerReferences"), f"{field}.ownerReferences"))
    causes.extend(validate_finalizers(meta.get("finalizers"), f"{field}.finalizers"))
    causes.extend(validate_managed_fields(meta.get("managedFields"), f"{field}.managedFields"))
    return causes


FIELD_MANAGER_MAX_LENGTH = 128
SUBRESOURCE_MAX_LENGTH = 256


def validate_field_manager(manager: str, field: str) -> list[Cause]:
    """``ValidateFieldManager``: at most 128 bytes, printable characters only."""
    causes = []
    if len(manager.encode("utf-8", "surrogatepass")) > FIELD_MANAGER_MAX_LENGTH:
        causes.append(too_long_value(field, FIELD_MANAGER_MAX_LENGTH))
    position = 0
    for char in manager:
        if not char.isprintable():
            causes.append(invalid_value(field, manager,
                                        f"invalid character U+{ord(char):04X} (at position {position})"))
        position += len(char.encode("utf-8", "surrogatepass"))
    return causes


def validate_managed_fields(entries: Any, field: str) -> list[Cause]:
    """``ValidateManagedFields`` of the entries a write leaves (operation, fieldsType, manager,
    subresource); entries that did not decode never get here (the store ignores them)."""
    if not isinstance(entries, list):
        return []
    causes: list[Cause] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        path = f"{field}[{i}]"
        operation = entry.get("operation") or ""
        if operation not in ("Apply", "Update"):
            causes.append(invalid_value(f"{path}.operation", operation, "must be `Apply` or `Update`"))
        fields_type = entry.get("fieldsType") or ""
        if fields_type and fields_type != "FieldsV1":
            causes.append(invalid_value(f"{path}.fieldsType", fields_type, "must be `FieldsV1`"))
        if isinstance(entry.get("manager"), str):
            causes.extend(validate_field_manager(entry["manager"], f"{path}.manager"))
        subresource = entry.get("subresource")
        if isinstance(subresource, str) and len(subresource.encode("utf-8", "surrogatepass")) > SUBRESOURCE_MAX_LENGTH:
            causes.append(too_long_value(f"{path}.subresource", SUBRESOURCE_MAX_LENGTH))
    return causes
