"""The VirtualCluster schema: the single declaration behind request validation and OpenAPI.

Every field of ``virtualclusters.kosmos.io/v1alpha1`` is declared once here as a marshmallow
field carrying its description (``metadata["description"]``), its JSON type (the field class),
whether it is required, and its value rules (``validate=``). From that declaration:

* :func:`validate_spec` / :func:`validate_status` load the body through marshmallow and turn the
  error tree into Kubernetes ``StatusCause``\\ s (``spec.promotePolicies[0].nodeCount``,
  ``FieldValueInvalid``, ``Invalid value: -1: must be greater than or equal to 0``);
* :func:`unknown_fields` lists the paths a strict decoder would reject;
* :mod:`apiserver.endpoints.openapi` walks the same fields to publish OpenAPI v2 and v3.

Field names are the JSON names (camelCase) so that the error tree, the unknown-field walk and the
OpenAPI properties all speak the wire vocabulary without a mapping.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.machinery.errors import (
    FIELD_VALUE_DUPLICATE,
    FIELD_VALUE_INVALID,
    FIELD_VALUE_NOT_SUPPORTED,
    FIELD_VALUE_REQUIRED,
    Cause,
)
from apiserver.machinery.golang import go_bad_value
from apiserver.machinery.quantity import QuantityError, parse_quantity
from apiserver.machinery.selectors import label_key_errors, label_value_errors
from apiserver.machinery.validation import (
    OMIT_VALUE,
    SELECTOR_OPERATORS,
    dns1123_subdomain_errors,
    duplicate_value,
    field_error,
    invalid_value,
    label_map_errors,
    not_supported_value,
    selector_values_error,
)

# Names of referenced apimachinery definitions, as kube-openapi publishes them.
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
QUANTITY_REF = "io.k8s.apimachinery.pkg.api.resource.Quantity"
TIME_REF = f"{META}.Time"
FIELDS_V1_REF = f"{META}.FieldsV1"
RAW_EXTENSION_REF = "io.k8s.apimachinery.pkg.runtime.RawExtension"
DEFINITION_PREFIX = "io.kosmos.v1alpha1"

PHASES = ("Pending", "Preparing", "Initialized", "Completed", "Updating", "Deleting")
NODE_PHASES = ("Claimed", "Joining", "Ready", "Releasing")
CONDITION_STATUSES = ("True", "False", "Unknown")
SERVICE_TYPES = ("nodePort", "hostNetwork")

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


# --------------------------------------------------------------------------- causes


@dataclass(frozen=True)
class Problem:
    """A ``field.Error`` before its path is known; raised inside marshmallow, rendered later."""

    type: str
    detail: str = ""
    value: Any = OMIT_VALUE
    supported: tuple[str, ...] = ()
    expected_type: str = ""

    def cause(self, path: str) -> Cause:
        """The cause at ``path``, its message rendered by :mod:`apiserver.machinery.validation` as ``ErrorBody`` does."""
        if self.expected_type:
            return invalid_value(path, self.value, f"{path} in body must be of type {self.expected_type}: "
                                                   f"{go_bad_value(self.value)}")
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
    """Inclusive bounds with kube's wording; OpenAPI publishes them as minimum/maximum."""

    def __call__(self, value: Any) -> Any:
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise _invalid(value, self.detail())
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


def _label_map_errors(labels: dict[str, str]) -> list[Problem]:
    """Kube reports bad label keys and values at the map itself, not at ``[key]``."""
    return [Problem(FIELD_VALUE_INVALID, msg, bad)
            for bad, msg in label_map_errors(labels)]


def _check_label_map(labels: dict[str, str]) -> dict[str, str]:
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
        kwargs.setdefault("allow_none", not kwargs.get("required", False))
        kwargs["metadata"] = {**kwargs.get("metadata", {}), "description": description}
        return kwargs


class Str(KubeField, fields.String):
    def __init__(self, description: str = "", **kwargs: Any) -> None:
        super().__init__(**self.options(description, kwargs))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str):
            raise _wrong_type("string", value)
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
        if isinstance(value, int) and not -(2**63) <= value < 2**63:  # stored objects hold int64 numbers only
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

    class Meta:
        unknown = EXCLUDE


def _api_version() -> Str:
    return Str("APIVersion defines the versioned schema of this representation of an object. Servers "
               "convert recognized schemas to the latest internal value and may reject unrecognized values.")


def _kind() -> Str:
    return Str("Kind is a string value representing the REST resource this object represents, in "
               "CamelCase. Servers may infer it from the endpoint the client submits requests to.")


class LabelSelectorRequirementSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.LabelSelectorRequirement"
    DESCRIPTION = ("A label selector requirement is a selector that contains values, a key, and an operator "
                   "that relates the key and values.")

    key = Str("The label key that the selector applies to.", required=True, validate=Check(qualified_name_errors))
    operator = Str("The key's relationship to a set of values: In, NotIn, Exists or DoesNotExist.",
                   required=True, validate=OneOf(SELECTOR_OPERATORS))
    values = Array(Str(validate=Check(label_value_errors)),
                   "The label values. Must be non-empty for In and NotIn, and empty for Exists and "
                   "DoesNotExist.")

    @validates_schema(skip_on_field_errors=False, pass_original=True)
    def _values_match_operator(self, data: dict[str, Any], original: Any, **_: Any) -> None:
        """Kube's rule: set operators need values, existence operators must not have any.

        Reads the original input so that values which failed their own checks still count as given.
        """
        problem = selector_values_error(data.get("operator") or "", original.get("values") or [])
        if problem:
            raise ValidationError([Problem(*problem)], field_name="values")


class LabelSelectorSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.LabelSelector"
    DESCRIPTION = ("A label selector is a label query over a set of resources. The result of matchLabels and "
                   "matchExpressions are ANDed. An empty label selector matches all objects. A null label "
                   "selector matches no objects.")

    matchLabels = Map(Str(), "A map of {key,value} pairs. A single {key,value} in the matchLabels map is "
                      "equivalent to an element of matchExpressions whose key field is \"key\", the operator "
                      "is \"In\", and the values array contains only \"value\". The requirements are ANDed.",
                      validate=_check_label_map)
    matchExpressions = Array(Obj(LabelSelectorRequirementSchema),
                             "A list of label selector requirements. The requirements are ANDed.")


class PromotePolicySchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.PromotePolicy"
    DESCRIPTION = "Promote a number of free host nodes matching a label selector into the virtual cluster."

    labelSelector = Obj(LabelSelectorSchema,
                        "Selects the host nodes eligible for promotion. When unset, any free host node is "
                        "eligible.")
    nodeCount = Int("How many matching free host nodes to promote into the virtual cluster.", required=True,
                    validate=Range(min=0))


class NodeInfoSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.NodeInfo"
    DESCRIPTION = "A host node to promote, named explicitly (kubenest form)."

    nodeName = Str("Name of the host node to promote.", required=True, validate=Check(dns1123_subdomain_errors))


class PromoteResourcesSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.PromoteResources"
    DESCRIPTION = ("Host capacity to promote into the virtual cluster: explicit nodes, or enough free nodes to "
                   "cover an amount of resources.")

    nodes = Array(Str(validate=Check(dns1123_subdomain_errors)),
                  "Names of host nodes to promote (k8s-in-k8s proposal form).", validate=Unique())
    nodeInfos = Array(Obj(NodeInfoSchema), "Host nodes to promote (kubenest form).",
                      validate=Unique(lambda info: info.get("nodeName"), "nodeName"))
    resources = Map(Quantity(), "Resource amounts, such as cpu and memory, to cover: free host nodes are "
                    "promoted until the sum of their allocatable resources reaches every amount.",
                    keys=Str(validate=Check(qualified_name_errors)))


class KubeInKubeConfigSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.KubeInKubeConfig"
    DESCRIPTION = ("Shape of the tenant control plane when it runs as pods in the host cluster (the pods "
                   "runtime).")

    apiServerReplicas = Int("Number of tenant kube-apiserver replicas.", validate=Range(min=1))
    apiServerServiceType = Str("How the tenant kube-apiserver is exposed: nodePort (a NodePort Service) or "
                               "hostNetwork (pods on the host network).", validate=OneOf(SERVICE_TYPES))
    externalPort = Int("Port on which the tenant kube-apiserver is exposed; chosen by the server when unset.",
                       validate=Range(1, 65535))
    forceDestroy = Bool("Tear the control plane down on deletion even if releasing its nodes fails.")
    etcdStorageClass = Str("StorageClass of the tenant etcd volumes; the host default when unset.",
                           validate=Check(optional_subdomain_errors))
    etcdUnitSize = Quantity("Size of each tenant etcd volume, for example 1Gi.", minimum="positive")
    clusterCIDR = Str("Pod network CIDR of the tenant cluster, for example 10.244.0.0/16.",
                      validate=Check(cidr_errors, format="cidr"))


class VirtualClusterSpecSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterSpec"
    DESCRIPTION = "The desired state of a VirtualCluster."

    externalIP = Str("An IP address or DNS name added to the tenant apiserver certificate's SANs; when set it "
                     "is also the host of the server URL in issued kubeconfigs. Immutable.",
                     validate=Check(optional_host_errors))
    externalIps = Array(Str(validate=Check(host_errors)),
                        "More IP addresses or DNS names for the tenant apiserver certificate's SANs. Immutable.")
    promotePolicies = Array(Obj(PromotePolicySchema),
                            "Label-selector based node promotion: each policy promotes nodeCount matching free "
                            "host nodes.")
    promoteResources = Obj(PromoteResourcesSchema,
                           "Explicit host nodes, or an amount of resources, to promote into the virtual cluster.")
    kubeInKubeConfig = Obj(KubeInKubeConfigSchema, "Control-plane shape for the pods runtime.")
    kubeconfig = Str("Reserved for importing an existing cluster; never written by the server (credentials are "
                     "served by the kubeconfig subresource).")


class ConditionSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCondition"
    DESCRIPTION = "One aspect of a VirtualCluster's state, as seen at a given generation."

    type = Str("Type of condition: ControlPlaneReady, NodesReady or Ready.", required=True,
               validate=Check(qualified_name_errors))
    status = Str("Status of the condition: True, False or Unknown.", required=True,
                 validate=OneOf(CONDITION_STATUSES))
    reason = Str("A machine-readable CamelCase reason for the condition's last transition.")
    message = Str("A human-readable explanation of the condition's last transition.")
    lastTransitionTime = Time("When the condition last changed status.")
    observedGeneration = Int("The metadata.generation the condition was set for; a condition older than the "
                             "object's generation is stale.", format="int64", validate=Range(min=0))


class NodeStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterNode"
    DESCRIPTION = "A host node promoted into the virtual cluster."

    name = Str("Name of the host node.", required=True, validate=Check(dns1123_subdomain_errors))
    phase = Str("Where the node is in its promotion: Claimed, Joining, Ready or Releasing.",
                validate=OneOf(NODE_PHASES))


class VirtualClusterStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterStatus"
    DESCRIPTION = "The observed state of a VirtualCluster, written by the reconciler through /status."

    phase = Str("Lifecycle phase: Pending, Preparing, Initialized, Completed, Updating or Deleting. No phase is "
                "terminal: failures are retried and explained in reason, message and conditions.",
                validate=OneOf(PHASES))
    reason = Str("A machine-readable CamelCase reason for the last phase transition.")
    message = Str("A human-readable explanation of the last phase transition.")
    updateTime = Time("When the phase last changed.")
    observedGeneration = Int("The metadata.generation this status describes.", format="int64",
                             validate=Range(min=0))
    conditions = Array(Obj(ConditionSchema), "ControlPlaneReady, NodesReady and Ready conditions; `kubectl wait "
                       "--for=condition=Ready` waits on Ready.",
                       validate=Unique(lambda c: c.get("type"), "type"))
    controlPlaneEndpoint = Str("URL (https://host:port) of the tenant kube-apiserver.")
    port = Int("Port of the tenant kube-apiserver.", validate=Range(1, 65535))
    nodes = Array(Obj(NodeStatusSchema), "Host nodes promoted into the virtual cluster and their phases.",
                  validate=Unique(lambda n: n.get("name"), "name"))


class OwnerReferenceSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.OwnerReference"
    DESCRIPTION = ("OwnerReference contains enough information to let you identify an owning object. An owning "
                   "object must be in the same namespace as the dependent, or be cluster-scoped.")

    apiVersion = Str("API version of the referent.", required=True)
    kind = Str("Kind of the referent.", required=True)
    name = Str("Name of the referent.", required=True)
    uid = Str("UID of the referent.", required=True)
    controller = Bool("If true, this reference points to the managing controller.")
    blockOwnerDeletion = Bool("If true and the owner has the foregroundDeletion finalizer, the owner cannot be "
                              "deleted from the key-value store until this reference is removed.")


class ManagedFieldsEntrySchema(KubeSchema):
    OPENAPI_NAME = f"{META}.ManagedFieldsEntry"
    DESCRIPTION = ("ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that "
                   "the fieldset applies to.")

    manager = Str("An identifier of the workflow managing these fields.")
    operation = Str("The type of operation which lead to this entry being created: Apply or Update.")
    apiVersion = Str("The version of this resource that this field set applies to, as group/version.")
    time = Time("When this entry was added; also updated when a field is added or the manager changes an "
                "owned field's value.")
    fieldsType = Str("The discriminator for the different fields format and version; only FieldsV1.")
    fieldsV1 = FreeObject(FIELDS_V1_REF, "The first JSON version of the set of fields this entry manages.")
    subresource = Str("The name of the subresource used to update the object, or empty for the main resource.")


class ObjectMetaSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.ObjectMeta"
    DESCRIPTION = ("ObjectMeta is metadata that all persisted resources must have, which includes all objects "
                   "users must create.")

    name = Str("Name must be unique within a namespace; for a VirtualCluster it must be a DNS-1123 label. "
               "Cannot be updated.")
    generateName = Str("An optional prefix used by the server to generate a unique name when name is not "
                       "provided.")
    namespace = Str("The namespace the object lives in; it must be a DNS-1123 label. Cannot be updated.")
    selfLink = Str("Deprecated and unset by the server.")
    uid = Str("The unique in time and space value for this object, generated by the server on create. "
              "Read-only.")
    resourceVersion = Str("An opaque value identifying the internal version of this object, used for optimistic "
                          "concurrency and watches. Read-only.")
    generation = Int("A sequence number representing a specific generation of the desired state: 1 on create, "
                     "incremented on every spec change. Read-only.", format="int64")
    creationTimestamp = Time("When the server created this object. Read-only.")
    deletionTimestamp = Time("When the object was asked to be deleted; it is removed once its finalizers are "
                             "empty. Read-only.")
    deletionGracePeriodSeconds = Int("Seconds allowed for graceful termination before removal. Read-only.",
                                     format="int64")
    labels = Map(Str(), "Map of string keys and values used to organize and select objects.")
    annotations = Map(Str(), "Unstructured key value map stored with the object, set by external tools.")
    ownerReferences = Array(Obj(OwnerReferenceSchema), "Objects this object depends on; it is garbage collected "
                            "when all of them are gone.")
    finalizers = Array(Str(), "Entries that must be empty before the object is removed from the registry; the "
                       "server adds kosmos.io/virtualcluster on create.")
    managedFields = Array(Obj(ManagedFieldsEntrySchema), "Which field manager manages which fields. Mostly for "
                          "internal housekeeping.")


class ListMetaSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.ListMeta"
    DESCRIPTION = "ListMeta describes metadata that synthetic resources must have, including lists."

    selfLink = Str("Deprecated and unset by the server.")
    resourceVersion = Str("The version of the list, usable to start a watch from this point.")
    # A Python keyword, hence declared through data_key.
    continue_ = Str("Set when the list was truncated by limit: pass it back as continue to get the next page.",
                    data_key="continue")
    remainingItemCount = Int("Number of items after this page, when known (limited list).", format="int64")


class VirtualClusterSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualCluster"
    DESCRIPTION = ("A tenant Kubernetes control plane run for a namespace of the host cluster, with host nodes "
                   "promoted into it.")
    GVK = ({"group": VIRTUALCLUSTERS.group, "kind": VIRTUALCLUSTERS.kind, "version": VIRTUALCLUSTERS.version},)

    apiVersion = _api_version()
    kind = _kind()
    metadata = Obj(ObjectMetaSchema, "Standard object's metadata.")
    spec = Obj(VirtualClusterSpecSchema, "The desired state of the virtual cluster.")
    status = Obj(VirtualClusterStatusSchema, "The observed state of the virtual cluster. Read-only for the main "
                 "resource: written through the status subresource.")


class VirtualClusterListSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterList"
    DESCRIPTION = "A list of VirtualClusters."
    GVK = ({"group": VIRTUALCLUSTERS.group, "kind": VIRTUALCLUSTERS.list_kind,
            "version": VIRTUALCLUSTERS.version},)

    apiVersion = _api_version()
    kind = _kind()
    metadata = Obj(ListMetaSchema, "Standard list metadata.")
    items = Array(Obj(VirtualClusterSchema), "The VirtualClusters.", required=True)


_SPEC = VirtualClusterSpecSchema()
_STATUS = VirtualClusterStatusSchema()
_OBJECT = VirtualClusterSchema()


# --------------------------------------------------------------------------- public API


def validate_spec(spec: Any) -> list[Cause]:
    """Causes for everything wrong in ``spec`` (``None``, i.e. absent, is an empty spec)."""
    return _validate(_SPEC, spec, "spec")


def validate_status(status: Any) -> list[Cause]:
    """Causes for everything wrong in ``status`` (``None`` is an empty status)."""
    return _validate(_STATUS, status, "status")


def unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Paths of a whole VirtualCluster that no schema field declares, in kube's format
    (``spec.foo``, ``spec.promotePolicies[0].bar``), for fieldValidation Strict/Warn."""
    return [path for _, _, path in _unknown_in_schema(_OBJECT, obj, "")]


def prune_unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Drop, in place, every field :func:`unknown_fields` reports, and return their paths: what is
    stored is what is declared, as a structural CRD schema prunes (fieldValidation Warn and Ignore).

    Declared fields are stored in their declared type, as kube-apiserver stores a custom resource:
    a null where the field is optional is dropped (as it prunes nulls of non-nullable fields) and an
    integer written as ``100.0`` is stored as ``100`` (as Go encodes a whole float64)."""
    found = _unknown_in_schema(_OBJECT, obj, "")
    for holder, key, _ in found:
        holder.pop(key, None)
    _normalize_schema(_OBJECT, obj)
    return [path for _, _, path in found]


def _normalize_schema(schema: Schema, value: Any) -> None:
    if not isinstance(value, dict):
        return
    for key in list(value):
        fld = field_of(schema, str(key))
        if fld is None:
            continue
        sub = value[key]
        if sub is None:
            if fld.allow_none and not fld.required:
                del value[key]
            continue
        value[key] = _normalize_field(fld, sub)


def _normalize_field(fld: fields.Field, value: Any) -> Any:
    if isinstance(fld, fields.Integer) and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(fld, fields.Nested):
        _normalize_schema(fld.schema, value)
    elif isinstance(fld, fields.List) and isinstance(value, list):
        value[:] = [_normalize_field(fld.inner, item) if item is not None else None for item in value]
    elif isinstance(fld, fields.Dict) and isinstance(value, dict) and fld.value_field is not None:
        for k, v in value.items():
            if v is not None:
                value[k] = _normalize_field(fld.value_field, v)
    return value


_FIELDS_BY_KEY: dict[type[Schema], dict[str, fields.Field]] = {}


def field_of(schema: Schema, name: str) -> fields.Field | None:
    """The field a JSON key maps to (honours ``data_key``)."""
    by_key = _FIELDS_BY_KEY.get(type(schema))
    if by_key is None:
        by_key = _FIELDS_BY_KEY[type(schema)] = {(fld.data_key or attr): fld for attr, fld in schema.fields.items()}
    return by_key.get(name)


def _validate(schema: Schema, value: Any, path: str) -> list[Cause]:
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


def _unknown_in_schema(schema: Schema, value: Any, path: str) -> list[Unknown]:
    if not isinstance(value, dict):
        return []
    out: list[Unknown] = []
    for key, sub in value.items():
        child_path = _join(path, str(key))
        fld = field_of(schema, str(key))
        out += [(value, key, child_path)] if fld is None else _unknown_in_field(fld, sub, child_path)
    return out


def _unknown_in_field(fld: fields.Field, value: Any, path: str) -> list[Unknown]:
    if isinstance(fld, fields.Nested):
        return _unknown_in_schema(fld.schema, value, path)
    if isinstance(fld, fields.List) and isinstance(value, list):
        return [u for i, item in enumerate(value) for u in _unknown_in_field(fld.inner, item, f"{path}[{i}]")]
    if isinstance(fld, fields.Dict) and isinstance(value, dict) and fld.value_field is not None:
        return [u for k, v in value.items() for u in _unknown_in_field(fld.value_field, v, f"{path}[{k}]")]
    return []


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
