"""Name and ObjectMeta validation reports what kube-apiserver v1.35 reports, word for word.

Expected causes were checked against k8s.io/apimachinery v0.35.4
(validation.ValidateObjectMetaAccessor, v1validation.ValidateLabelSelector).
"""

from __future__ import annotations

import pytest

from apiserver.machinery.errors import (
    FIELD_VALUE_DUPLICATE,
    FIELD_VALUE_FORBIDDEN,
    FIELD_VALUE_INVALID,
    FIELD_VALUE_NOT_SUPPORTED,
    FIELD_VALUE_REQUIRED,
    FIELD_VALUE_TOO_LONG,
    Cause,
    invalid,
)
from apiserver.machinery.validation import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    duplicate_value,
    field_error,
    name_is_dns_label,
    name_is_dns_subdomain,
    name_is_path_segment,
    not_supported_value,
    validate_annotations,
    validate_finalizers,
    validate_label_selector,
    validate_labels,
    validate_object_meta,
)

LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
KEY_NAME_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
             "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
             "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def meta(**kw: object) -> dict[str, object]:
    return {"name": "web", "namespace": "ns", **kw}


# --- DNS names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "web-1", "123-abc", "a" * 63])
def test_valid_dns_labels_pass(name: str) -> None:
    assert dns1123_label_errors(name) == []


@pytest.mark.parametrize("name", ["", "Web", "-a", "a-", "a_b", "é"])
def test_invalid_dns_labels_get_the_rfc1123_message(name: str) -> None:
    assert dns1123_label_errors(name) == [LABEL_MSG]


def test_dns_label_with_dots_is_told_so() -> None:
    assert dns1123_label_errors("a.b") == ["must not contain dots"]


def test_too_long_dns_label_counts_characters() -> None:
    assert dns1123_label_errors("a" * 64) == ["must be no more than 63 characters"]
    assert dns1123_label_errors("A" * 64) == ["must be no more than 63 characters", LABEL_MSG]


def test_dns_subdomain_rules() -> None:
    assert dns1123_subdomain_errors("a.b-c.d") == []
    assert dns1123_subdomain_errors("a..b") == [SUBDOMAIN_MSG]
    assert dns1123_subdomain_errors("a" * 254) == ["must be no more than 253 characters"]


def test_generate_name_prefix_may_end_with_a_dash() -> None:
    assert name_is_dns_label("web-", prefix=True) == []
    assert name_is_dns_subdomain("web-", prefix=True) == []
    assert name_is_dns_label("web-", prefix=False) == [LABEL_MSG]
    assert name_is_dns_label("-", prefix=True) == [LABEL_MSG]


def test_path_segment_rule_rejects_dot_names_slashes_and_percent() -> None:
    assert name_is_path_segment("..") == ["may not be '..'"]
    assert name_is_path_segment(".") == ["may not be '.'"]
    assert name_is_path_segment("a/b%c") == ["may not contain '/'", "may not contain '%'"]
    assert name_is_path_segment("..", prefix=True) == []
    assert name_is_path_segment("Any_Thing") == []


# --- ObjectMeta --------------------------------------------------------------------------------


def test_valid_metadata_has_no_causes() -> None:
    assert validate_object_meta(meta(labels={"app": "web", "example.com/tier": ""},
                                     annotations={"Example.com/Note": "x" * 1000},
                                     finalizers=["kosmos.io/finalizer", "kubernetes"]), True) == []


def test_name_is_required_unless_generate_name_is_set() -> None:
    assert validate_object_meta({"namespace": "ns"}, True) == [
        Cause(FIELD_VALUE_REQUIRED, "Required value: name or generateName is required", "metadata.name")]
    assert validate_object_meta({"namespace": "ns", "generateName": "web-"}, True) == []


def test_bad_name_is_invalid_with_the_dns_label_message() -> None:
    assert validate_object_meta(meta(name="Web"), True) == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "Web": {LABEL_MSG}', "metadata.name")]


def test_name_rule_is_pluggable() -> None:
    assert validate_object_meta(meta(name="a.b"), True, name_is_dns_subdomain) == []
    assert validate_object_meta(meta(name="a.b"), True) == [
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "a.b": must not contain dots', "metadata.name")]


def test_bad_generate_name_is_reported_on_generate_name() -> None:
    assert validate_object_meta({"namespace": "ns", "generateName": "Web-"}, True) == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "Web-": {LABEL_MSG}', "metadata.generateName")]


def test_namespace_is_required_for_namespaced_objects() -> None:
    assert validate_object_meta({"name": "web"}, True) == [
        Cause(FIELD_VALUE_REQUIRED, "Required value", "metadata.namespace")]


def test_namespace_must_be_a_dns_label() -> None:
    assert validate_object_meta(meta(namespace="a.b"), True) == [
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "a.b": must not contain dots', "metadata.namespace")]


def test_namespace_is_forbidden_on_cluster_scoped_objects() -> None:
    assert validate_object_meta(meta(), False) == [
        Cause(FIELD_VALUE_FORBIDDEN, "Forbidden: not allowed on this type", "metadata.namespace")]


def test_negative_generation_is_invalid() -> None:
    assert validate_object_meta(meta(generation=-1), True) == [
        Cause(FIELD_VALUE_INVALID, "Invalid value: -1: must be greater than or equal to 0", "metadata.generation")]


def test_label_keys_and_values_are_reported_on_metadata_labels() -> None:
    assert validate_object_meta(meta(labels={"a_": "-v", "ok": "fine"}), True) == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "a_": {KEY_NAME_MSG}', "metadata.labels"),
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "-v": {VALUE_MSG}', "metadata.labels"),
    ]


def test_each_broken_label_key_rule_is_its_own_cause() -> None:
    assert [c.message for c in validate_labels({"/": ""}, "metadata.labels")] == [
        'Invalid value: "/": prefix part must be non-empty',
        'Invalid value: "/": name part must be non-empty',
        f'Invalid value: "/": {KEY_NAME_MSG}',
    ]


def test_label_value_length_counts_bytes() -> None:
    assert validate_labels({"a": "v" * 64}, "metadata.labels") == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "{"v" * 64}": must be no more than 63 bytes', "metadata.labels")]


def test_annotation_keys_are_case_insensitive_label_keys() -> None:
    assert validate_annotations({"Example.COM/Owner": "x"}, "metadata.annotations") == []
    assert validate_annotations({"_x": ""}, "metadata.annotations") == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "_x": {KEY_NAME_MSG}', "metadata.annotations")]


def test_annotations_may_not_exceed_256_kib_in_total() -> None:
    assert validate_annotations({"a": "v" * (256 * 1024 - 1)}, "metadata.annotations") == []
    assert validate_object_meta(meta(annotations={"a": "v" * (256 * 1024)}), True) == [
        Cause(FIELD_VALUE_TOO_LONG, "Too long: may not be more than 262144 bytes", "metadata.annotations")]


def test_finalizers_must_be_qualified_names() -> None:
    assert validate_object_meta(meta(finalizers=["kosmos.io/cleanup", "-x"]), True) == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "-x": {KEY_NAME_MSG}', "metadata.finalizers")]


def test_orphan_and_foreground_finalizers_are_exclusive() -> None:
    assert validate_finalizers(["orphan", "foregroundDeletion"], "metadata.finalizers") == [
        Cause(FIELD_VALUE_INVALID, 'Invalid value: ["orphan","foregroundDeletion"]: finalizer orphan and '
                                   "foregroundDeletion cannot be both set", "metadata.finalizers")]


def test_owner_references_need_their_identifying_fields() -> None:
    causes = validate_object_meta(meta(ownerReferences=[{"apiVersion": "", "kind": "", "name": "", "uid": ""}]), True)
    assert causes == [
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "": version must not be empty', "metadata.ownerReferences.apiVersion"),
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "": must not be empty', "metadata.ownerReferences.kind"),
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "": must not be empty', "metadata.ownerReferences.name"),
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "": must not be empty', "metadata.ownerReferences.uid"),
    ]


def test_only_one_owner_reference_may_be_the_controller() -> None:
    refs = [{"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": True},
            {"apiVersion": "apps/v1", "kind": "B", "name": "b", "uid": "2", "controller": True}]
    assert validate_object_meta(meta(ownerReferences=refs), True) == [Cause(
        FIELD_VALUE_INVALID,
        'Invalid value: [{"apiVersion":"v1","kind":"A","name":"a","uid":"1","controller":true},'
        '{"apiVersion":"apps/v1","kind":"B","name":"b","uid":"2","controller":true}]: Only one reference can '
        'have Controller set to true. Found "true" in references for A/a and B/b',
        "metadata.ownerReferences")]


def test_events_cannot_own_objects() -> None:
    ref = {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"}
    assert validate_object_meta(meta(ownerReferences=[ref]), True) == [Cause(
        FIELD_VALUE_INVALID, 'Invalid value: {"apiVersion":"v1","kind":"Event","name":"e","uid":"u"}: '
                             "/v1, Kind=Event is disallowed from being an owner", "metadata.ownerReferences")]


def test_causes_come_in_kube_order_and_feed_the_422_message() -> None:
    causes = validate_object_meta({"name": "Web", "labels": {"a": "-"}}, True)
    assert [c.field for c in causes] == ["metadata.name", "metadata.namespace", "metadata.labels"]
    err = invalid("VirtualCluster", "kosmos.io", "Web", causes)
    assert err.code == 422
    assert err.message.startswith('VirtualCluster.kosmos.io "Web" is invalid: [metadata.name: Invalid value: "Web": ')
    assert "metadata.namespace: Required value, metadata.labels: Invalid value: \"-\": " in err.message


def test_mistyped_maps_become_causes_instead_of_crashes() -> None:
    causes = validate_object_meta(meta(labels=["a"]), True)
    assert [(c.type, c.field) for c in causes] == [("FieldValueTypeInvalid", "metadata.labels")]


# --- label selectors inside specs --------------------------------------------------------------


def test_label_selector_validation_reports_field_paths() -> None:
    selector = {
        "matchLabels": {"a_": "b"},
        "matchExpressions": [
            {"key": "k", "operator": "In"},
            {"key": "k", "operator": "Exists", "values": ["x"]},
            {"key": "k", "operator": "Gt", "values": ["1"]},
            {"key": "-k", "operator": "NotIn", "values": ["ok", "-bad"]},
        ],
    }
    path = "spec.promotePolicies[0].labelSelector"
    assert validate_label_selector(selector, path) == [
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "a_": {KEY_NAME_MSG}', f"{path}.matchLabels"),
        Cause(FIELD_VALUE_REQUIRED, "Required value: must be specified when `operator` is 'In' or 'NotIn'",
              f"{path}.matchExpressions[0].values"),
        Cause(FIELD_VALUE_FORBIDDEN, "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
              f"{path}.matchExpressions[1].values"),
        Cause(FIELD_VALUE_INVALID, 'Invalid value: "Gt": not a valid selector operator',
              f"{path}.matchExpressions[2].operator"),
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "-k": {KEY_NAME_MSG}', f"{path}.matchExpressions[3].key"),
        Cause(FIELD_VALUE_INVALID, f'Invalid value: "-bad": {VALUE_MSG}', f"{path}.matchExpressions[3].values[1]"),
    ]


def test_absent_label_selector_is_valid() -> None:
    assert validate_label_selector(None, "spec.selector") == []
    assert validate_label_selector({}, "spec.selector") == []


# --- field.Error bodies shared with the VirtualCluster schema ----------------------------------


def test_field_errors_render_like_error_body() -> None:
    assert not_supported_value("spec.t", "C", ["a", "b\n"]) == Cause(
        FIELD_VALUE_NOT_SUPPORTED, 'Unsupported value: "C": supported values: "a", "b\\n"', "spec.t")
    assert duplicate_value("spec.l[1]", 2.0) == Cause(FIELD_VALUE_DUPLICATE, "Duplicate value: 2", "spec.l[1]")
    # field.omitValue: the type alone, no value and no trailing separator.
    assert field_error(FIELD_VALUE_INVALID, "spec.x") == Cause(FIELD_VALUE_INVALID, "Invalid value", "spec.x")
