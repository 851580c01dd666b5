"""The VirtualCluster schema: kube-style causes, unknown fields, and descriptions on every field."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from marshmallow import fields

from apiserver.apis.schema import (
    VirtualClusterListSchema,
    VirtualClusterSchema,
    prune_unknown_fields,
    unknown_fields,
    validate_spec,
    validate_status,
)
from apiserver.machinery import errors
from apiserver.machinery.errors import Cause
from apiserver.machinery.fields import KubeSchema, iter_schemas

REPO = Path(__file__).resolve().parents[2]
# The repository's examples, and the contract's originals when the shared folder is alongside.
EXAMPLES = sorted({*(REPO / "examples").glob("*.yaml"), *(REPO.parent / "shared" / "examples").glob("*.yaml")})
QUANTITY_REGEX_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


def policy(**fields_: Any) -> dict[str, Any]:
    return {"promotePolicies": [{"nodeCount": 1, **fields_}]}


def expressions(*requirements: dict[str, Any]) -> dict[str, Any]:
    return policy(labelSelector={"matchExpressions": list(requirements)})


def by_field(causes: list[Cause]) -> dict[str, Cause]:
    return {c.field: c for c in causes}


# --------------------------------------------------------------------------- examples


def test_the_examples_exist() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_each_example_validates_cleanly_with_no_unknown_fields(path: Path) -> None:
    for obj in yaml.safe_load_all(path.read_text()):
        if not obj or obj.get("kind") != "VirtualCluster":
            continue
        assert validate_spec(obj.get("spec")) == []
        assert validate_status(obj.get("status")) == []
        assert unknown_fields(obj) == []


def test_a_fully_populated_spec_and_status_are_valid() -> None:
    spec = {
        "externalIP": "tenant.example.com",
        "externalIps": ["10.0.0.1", "2001:db8::1", "api.example.com"],
        "promotePolicies": [{"labelSelector": {
            "matchLabels": {"kubernetes.io/hostname": "node-1", "empty": ""},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                 {"key": "gpu", "operator": "DoesNotExist"}]}, "nodeCount": 0}],
        "promoteResources": {"nodes": ["node1"], "nodeInfos": [{"nodeName": "node2"}],
                             "resources": {"cpu": 10, "memory": "100Gi", "nvidia.com/gpu": "1", "x": 0.5},
                             "resourcesMode": "Shared"},
        "kubeInKubeConfig": {"apiServerReplicas": 3, "apiServerServiceType": "hostNetwork", "externalPort": 31443,
                             "forceDestroy": True, "etcdStorageClass": "fast-ssd", "etcdUnitSize": "1Gi",
                             "clusterCIDR": "10.244.0.0/16"},
        "kubeconfig": "",
    }
    status = {
        "phase": "Completed", "reason": "Ready", "message": "all good", "updateTime": "2024-01-02T15:04:05Z",
        "observedGeneration": 2,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2024-01-02T15:04:05.123+02:00", "observedGeneration": 2}],
        "controlPlaneEndpoint": "https://127.0.0.1:6443", "port": 6443,
        "nodes": [{"name": "node1", "phase": "Ready"}, {"name": "kosmos-shared-0", "phase": "Ready", "shared": True}],
        "sharedResources": {"namespace": "vcw-tenant1-tenant1-cluster-0a1b2c",
                            "capacity": {"cpu": 10, "memory": "100Gi"}, "used": {"cpu": "2500m", "memory": "3Gi"}},
    }
    assert validate_spec(spec) == []
    assert validate_status(status) == []
    assert unknown_fields({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
                           "metadata": {"name": "a"}, "spec": spec, "status": status}) == []


def test_absent_spec_and_status_are_empty_and_valid() -> None:
    assert validate_spec(None) == []
    assert validate_spec({}) == []
    assert validate_status(None) == []


# --------------------------------------------------------------------------- causes


def test_negative_node_count_is_reported_with_its_field_path() -> None:
    assert validate_spec(policy(nodeCount=-1)) == [
        Cause("FieldValueInvalid", "Invalid value: -1: spec.promotePolicies[0].nodeCount in body should be greater "
                                   "than or equal to 0", "spec.promotePolicies[0].nodeCount")]


def test_a_wrong_json_type_is_reported_like_a_crd_type_error() -> None:
    assert validate_spec(policy(nodeCount="3")) == [Cause(
        "FieldValueTypeInvalid",
        'Invalid value: "string": spec.promotePolicies[0].nodeCount in body must be of type integer: "string"',
        "spec.promotePolicies[0].nodeCount")]


@pytest.mark.parametrize(("value", "json_type"), [(True, "boolean"), (1.5, "number"), ([1], "array"),
                                                   ({"a": 1}, "object")])
def test_type_errors_name_the_json_type_received(value: Any, json_type: str) -> None:
    [cause] = validate_spec(policy(nodeCount=value))
    assert cause.message.endswith(f'must be of type integer: "{json_type}"')


def test_an_integral_float_counts_as_an_integer() -> None:
    assert validate_spec(policy(nodeCount=2.0)) == []


def test_a_missing_or_null_node_count_is_required() -> None:
    expected = [Cause("FieldValueRequired", "Required value", "spec.promotePolicies[0].nodeCount")]
    assert validate_spec({"promotePolicies": [{}]}) == expected
    assert validate_spec({"promotePolicies": [{"nodeCount": None}]}) == expected


def test_a_node_count_beyond_int32_is_invalid() -> None:
    [cause] = validate_spec(policy(nodeCount=2**31))
    assert cause.field == "spec.promotePolicies[0].nodeCount"
    assert "must be between -2147483648 and 2147483647, inclusive" in cause.message


def test_a_spec_that_is_not_an_object_is_a_type_error() -> None:
    assert validate_spec("x") == [
        Cause("FieldValueTypeInvalid", 'Invalid value: "string": spec in body must be of type object: "string"',
              "spec")]


def test_a_list_given_as_a_scalar_is_a_type_error_at_the_list() -> None:
    [cause] = validate_spec({"promotePolicies": {"nodeCount": 1}})
    assert (cause.field, cause.message) == (
        "spec.promotePolicies",
        'Invalid value: "object": spec.promotePolicies in body must be of type array: "object"')


def test_an_unknown_selector_operator_lists_the_supported_values() -> None:
    assert validate_spec(expressions({"key": "a", "operator": "Foo", "values": ["x"]})) == [Cause(
        "FieldValueNotSupported",
        'Unsupported value: "Foo": supported values: "In", "NotIn", "Exists", "DoesNotExist"',
        "spec.promotePolicies[0].labelSelector.matchExpressions[0].operator")]


@pytest.mark.parametrize("operator", ["In", "NotIn"])
def test_set_operators_require_values(operator: str) -> None:
    assert validate_spec(expressions({"key": "a", "operator": operator})) == [Cause(
        "FieldValueRequired", "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        "spec.promotePolicies[0].labelSelector.matchExpressions[0].values")]


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist"])
def test_existence_operators_forbid_values(operator: str) -> None:
    assert validate_spec(expressions({"key": "a", "operator": operator, "values": ["x"]})) == [Cause(
        "FieldValueForbidden", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        "spec.promotePolicies[0].labelSelector.matchExpressions[0].values")]


def test_selector_requirement_key_and_operator_are_required() -> None:
    causes = by_field(validate_spec(expressions({})))
    prefix = "spec.promotePolicies[0].labelSelector.matchExpressions[0]"
    assert causes[f"{prefix}.key"].type == "FieldValueRequired"
    assert causes[f"{prefix}.operator"].type == "FieldValueRequired"


def test_invalid_requirement_key_and_values_are_reported_at_their_own_paths() -> None:
    causes = by_field(validate_spec(expressions({"key": "bad key", "operator": "In", "values": ["ok", "-bad"]})))
    prefix = "spec.promotePolicies[0].labelSelector.matchExpressions[0]"
    assert set(causes) == {f"{prefix}.key", f"{prefix}.values[1]"}
    assert causes[f"{prefix}.key"].message.startswith('Invalid value: "bad key": name part must consist of')
    assert causes[f"{prefix}.values[1]"].message.startswith('Invalid value: "-bad": a valid label must be')


def test_invalid_match_labels_are_reported_at_the_map_like_kube() -> None:
    causes = validate_spec(policy(labelSelector={"matchLabels": {"a/b/c": "x", "ok": "not ok"}}))
    assert [c.field for c in causes] == ["spec.promotePolicies[0].labelSelector.matchLabels"] * 2
    assert causes[0].message.startswith('Invalid value: "a/b/c": a valid label key must consist of')  # apimachinery v0.35 wording
    assert causes[0].message.endswith("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
    assert causes[1].message.startswith('Invalid value: "not ok": a valid label must be an empty string')


def test_a_label_key_with_a_bad_prefix_names_the_prefix_part() -> None:
    [cause] = validate_spec(policy(labelSelector={"matchLabels": {"Bad_Prefix/name": "x"}}))
    assert 'Invalid value: "Bad_Prefix/name": prefix part a lowercase RFC 1123 subdomain' in cause.message


def test_label_rules_are_kubes_content_rules_counting_bytes() -> None:
    value = "é" * 32  # 32 characters, 64 bytes
    causes = validate_spec(policy(labelSelector={"matchLabels": {"a": value}}))
    assert causes[0].message == f'Invalid value: "{value}": must be no more than 63 bytes'
    [cause] = validate_spec(expressions({"key": "a", "operator": "In", "values": [value[:31]]}))
    assert cause.message.startswith(f'Invalid value: "{value[:31]}": a valid label must be')


def test_bad_values_are_quoted_like_go() -> None:
    [cause] = validate_spec({"externalIP": "a\x01"})
    assert cause.message.startswith('Invalid value: "a\\x01": must be a valid IP address')


def test_node_names_follow_the_dns_subdomain_rule_of_object_names() -> None:
    [cause] = validate_status({"nodes": [{"name": "a" * 254}]})
    assert (cause.field, cause.message) == (
        "status.nodes[0].name", f'Invalid value: "{"a" * 254}": must be no more than 253 characters')


def test_a_malformed_quantity_is_reported_at_its_map_key() -> None:
    assert validate_spec({"promoteResources": {"resources": {"cpu": "ten"}}}) == [
        Cause("FieldValueInvalid", f'Invalid value: "ten": {QUANTITY_REGEX_MESSAGE}',
              "spec.promoteResources.resources[cpu]")]


def test_quantities_may_be_numbers_or_strings_with_surrounding_spaces() -> None:
    resources = {"cpu": 10, "memory": "100Gi", "a": 0.5, "b": "500m", "c": " 1Ki ", "d": "1e3"}
    assert validate_spec({"promoteResources": {"resources": resources}}) == []


def test_a_negative_quantity_is_invalid() -> None:
    assert validate_spec({"promoteResources": {"resources": {"memory": "-1Gi"}}}) == [
        Cause("FieldValueInvalid", 'Invalid value: "-1Gi": must be greater than or equal to 0',
              "spec.promoteResources.resources[memory]")]


def test_a_quantity_of_the_wrong_json_type_is_a_type_error() -> None:
    [cause] = validate_spec({"promoteResources": {"resources": {"cpu": True}}})
    assert cause.message == ('Invalid value: "boolean": spec.promoteResources.resources[cpu] in body must be of '
                             'type number,string: "boolean"')


def test_an_invalid_resource_name_is_reported_at_its_map_key() -> None:
    [cause] = validate_spec({"promoteResources": {"resources": {"bad name": "1"}}})
    assert cause.field == "spec.promoteResources.resources[bad name]"
    assert cause.message.startswith('Invalid value: "bad name": name part must consist of')


def test_node_names_must_be_dns_subdomains_and_unique() -> None:
    causes = validate_spec({"promoteResources": {"nodes": ["Node_1"]}})
    assert [c.field for c in causes] == ["spec.promoteResources.nodes[0]"]
    assert "a lowercase RFC 1123 subdomain must consist of" in causes[0].message
    assert validate_spec({"promoteResources": {"nodes": ["a", "b", "a"]}}) == [
        Cause("FieldValueDuplicate", 'Duplicate value: "a"', "spec.promoteResources.nodes[2]")]
    assert validate_spec({"promoteResources": {"nodeInfos": [{"nodeName": "a"}, {"nodeName": "a"}]}}) == [
        Cause("FieldValueDuplicate", 'Duplicate value: "a"', "spec.promoteResources.nodeInfos[1].nodeName")]


def test_a_node_info_needs_a_node_name() -> None:
    assert validate_spec({"promoteResources": {"nodeInfos": [{}]}}) == [
        Cause("FieldValueRequired", "Required value", "spec.promoteResources.nodeInfos[0].nodeName")]


@pytest.mark.parametrize("mode", ["Shared", "Dedicated"])
def test_resources_mode_is_shared_or_dedicated(mode: str) -> None:
    assert validate_spec({"promoteResources": {"resources": {"cpu": 1}, "resourcesMode": mode}}) == []


@pytest.mark.parametrize("mode", ["shared", "Exclusive", ""])
def test_an_unknown_resources_mode_lists_the_supported_values_as_a_crd_enum_does(mode: str) -> None:
    assert validate_spec({"promoteResources": {"resourcesMode": mode}}) == [Cause(
        "FieldValueNotSupported", f'Unsupported value: "{mode}": supported values: "Dedicated", "Shared"',
        "spec.promoteResources.resourcesMode")]


@pytest.mark.parametrize(("value", "json_type", "echoed"), [
    (True, "boolean", "true"), (1, "integer", "1"), (1.0, "number", "1"), (1e20, "number", "1e+20"),
    ({"a": 1}, "object", "{}"), ([1, 2.0, {"a": "b"}], "array", "[1,2,{}]"), ([], "array", "[]"),
])
def test_an_enum_of_the_wrong_json_type_gets_the_type_error_and_the_enum_error_as_a_crd_does(
        value: Any, json_type: str, echoed: str) -> None:
    path = "spec.promoteResources.resourcesMode"
    assert validate_spec({"promoteResources": {"resourcesMode": value}}) == [
        Cause("FieldValueTypeInvalid", f'Invalid value: "{json_type}": {path} in body must be of type string: '
                                       f'"{json_type}"', path),
        Cause("FieldValueNotSupported", f'Unsupported value: {echoed}: supported values: "Dedicated", "Shared"', path)]


def test_every_enum_checks_a_value_of_the_wrong_type_against_its_values() -> None:
    causes = validate_spec({"kubeInKubeConfig": {"apiServerServiceType": 7}})
    assert [c.message for c in causes] == [
        'Invalid value: "integer": spec.kubeInKubeConfig.apiServerServiceType in body must be of type string: '
        '"integer"', 'Unsupported value: 7: supported values: "nodePort", "hostNetwork"']
    assert [c.type for c in validate_status({"phase": False})] == ["FieldValueTypeInvalid", "FieldValueNotSupported"]
    # a string field without an enum has the type error only
    assert [c.type for c in validate_spec({"kubeconfig": 1})] == ["FieldValueTypeInvalid"]


@pytest.mark.parametrize("given", [{}, {"resources": {"cpu": 1}}, {"nodes": ["n1"]}, {"resourcesMode": None}])
def test_resources_mode_defaults_to_shared_where_promote_resources_is_given(given: dict[str, Any]) -> None:
    obj = {"spec": {"promoteResources": dict(given)}}
    assert prune_unknown_fields(obj) == []
    assert obj["spec"]["promoteResources"]["resourcesMode"] == "Shared"


def test_an_explicit_resources_mode_is_kept_and_none_is_made_up_without_promote_resources() -> None:
    kept = {"spec": {"promoteResources": {"resources": {"cpu": 1}, "resourcesMode": "Dedicated"}}}
    prune_unknown_fields(kept)
    assert kept["spec"]["promoteResources"] == {"resources": {"cpu": 1}, "resourcesMode": "Dedicated"}
    without = {"spec": {"promotePolicies": [{"nodeCount": 1}]}}
    prune_unknown_fields(without)
    assert without == {"spec": {"promotePolicies": [{"nodeCount": 1}]}}


@pytest.mark.parametrize(("resource", "value", "message"), [
    ("cpu", "ten", f'Invalid value: "ten": {QUANTITY_REGEX_MESSAGE}'),
    ("memory", "100GB", f'Invalid value: "100GB": {QUANTITY_REGEX_MESSAGE}'),
    ("cpu", "-1", 'Invalid value: "-1": must be greater than or equal to 0'),
    ("memory", -5, "Invalid value: -5: must be greater than or equal to 0"),
])
def test_cpu_and_memory_are_validated_as_quantities_in_kubes_words(resource: str, value: Any, message: str) -> None:
    assert validate_spec({"promoteResources": {"resources": {resource: value}}}) == [
        Cause("FieldValueInvalid", message, f"spec.promoteResources.resources[{resource}]")]


def test_status_shared_resources_are_checked() -> None:
    causes = by_field(validate_status({"sharedResources": {
        "namespace": "Not_A_Namespace", "capacity": {"cpu": "ten", "bad name": "1"}, "used": {"memory": -1}}}))
    assert causes.keys() == {"status.sharedResources.namespace", "status.sharedResources.capacity[cpu]",
                             "status.sharedResources.capacity[bad name]", "status.sharedResources.used[memory]"}
    assert causes["status.sharedResources.namespace"].message.startswith(
        'Invalid value: "Not_A_Namespace": a lowercase RFC 1123 label must consist of')
    assert causes["status.sharedResources.capacity[cpu]"].message == f'Invalid value: "ten": {QUANTITY_REGEX_MESSAGE}'
    assert causes["status.sharedResources.used[memory]"].message == (
        "Invalid value: -1: must be greater than or equal to 0")
    [dotted] = validate_status({"sharedResources": {"namespace": "a.b"}})
    assert dotted.message == 'Invalid value: "a.b": must not contain dots'
    [typed] = validate_status({"sharedResources": {"capacity": []}})
    assert typed.message.endswith('status.sharedResources.capacity in body must be of type object: "array"')


def test_a_status_node_may_be_marked_shared_with_a_boolean() -> None:
    assert validate_status({"nodes": [{"name": "kosmos-shared-0", "phase": "Ready", "shared": True},
                                      {"name": "node1", "shared": False}]}) == []
    [cause] = validate_status({"nodes": [{"name": "kosmos-shared-0", "shared": "yes"}]})
    assert (cause.field, cause.message) == (
        "status.nodes[0].shared",
        'Invalid value: "string": status.nodes[0].shared in body must be of type boolean: "string"')


@pytest.mark.parametrize("address", ["192.168.0.1", "2001:db8::1", "tenant.example.com", "localhost", ""])
def test_external_ip_accepts_ips_dns_names_and_empty(address: str) -> None:
    assert validate_spec({"externalIP": address}) == []


@pytest.mark.parametrize("address", ["not_valid", "Tenant.Example.com", "1.2.3.4:80", "http://x"])
def test_external_ip_rejects_anything_else(address: str) -> None:
    [cause] = validate_spec({"externalIP": address})
    assert cause.field == "spec.externalIP"
    assert cause.message.startswith(f'Invalid value: "{address}": must be a valid IP address')


def test_each_external_ips_entry_is_checked_at_its_index() -> None:
    assert [c.field for c in validate_spec({"externalIps": ["1.2.3.4", "", "x_y"]})] == [
        "spec.externalIps[1]", "spec.externalIps[2]"]


def test_kube_in_kube_config_rules() -> None:
    causes = by_field(validate_spec({"kubeInKubeConfig": {
        "apiServerReplicas": 0, "apiServerServiceType": "LoadBalancer", "externalPort": 70000,
        "forceDestroy": "yes", "etcdStorageClass": "Fast", "etcdUnitSize": "0", "clusterCIDR": "10.0.0.1"}}))
    p = "spec.kubeInKubeConfig."
    assert causes[p + "apiServerReplicas"].message == (
        "Invalid value: 0: spec.kubeInKubeConfig.apiServerReplicas in body should be greater than or equal to 1")
    assert causes[p + "apiServerServiceType"] == Cause(
        "FieldValueNotSupported", 'Unsupported value: "LoadBalancer": supported values: "nodePort", "hostNetwork"',
        p + "apiServerServiceType")
    assert causes[p + "externalPort"].message == (
        "Invalid value: 70000: spec.kubeInKubeConfig.externalPort in body should be less than or equal to 65535")
    assert causes[p + "forceDestroy"].message.endswith('must be of type boolean: "string"')
    assert causes[p + "etcdStorageClass"].message.startswith('Invalid value: "Fast": a lowercase RFC 1123')
    assert causes[p + "etcdUnitSize"].message == 'Invalid value: "0": must be greater than zero'
    assert causes[p + "clusterCIDR"].message == (
        'Invalid value: "10.0.0.1": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)')
    assert len(causes) == 7


def test_every_problem_is_reported_not_only_the_first() -> None:
    spec = {"promotePolicies": [{"nodeCount": -1}, {"nodeCount": -2}], "externalIP": "a b"}
    assert [c.field for c in validate_spec(spec)] == [
        "spec.externalIP", "spec.promotePolicies[0].nodeCount", "spec.promotePolicies[1].nodeCount"]


def test_causes_render_into_kubes_invalid_status_message() -> None:
    err = errors.invalid("VirtualCluster", "kosmos.io", "dev", validate_spec(policy(nodeCount=-1)))
    assert err.code == 422
    detail = "Invalid value: -1: spec.promotePolicies[0].nodeCount in body should be greater than or equal to 0"
    assert err.message == f'VirtualCluster.kosmos.io "dev" is invalid: spec.promotePolicies[0].nodeCount: {detail}'
    assert err.status()["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "message": detail, "field": "spec.promotePolicies[0].nodeCount"}]


# --------------------------------------------------------------------------- status


def test_status_phase_is_one_of_the_documented_phases() -> None:
    assert validate_status({"phase": "Failed"}) == [Cause(
        "FieldValueNotSupported",
        'Unsupported value: "Failed": supported values: "Pending", "Preparing", "Initialized", "Completed", '
        '"Updating", "Upgrading", "Hibernating", "Hibernated", "Waking", "Deleting"', "status.phase")]


def test_status_times_must_be_rfc3339() -> None:
    assert validate_status({"updateTime": "yesterday"}) == [Cause(
        "FieldValueTypeInvalid", 'Invalid value: "yesterday": status.updateTime in body must be of type date-time: '
        '"yesterday"', "status.updateTime")]
    assert validate_status({"updateTime": "2024-13-01T00:00:00Z"})[0].field == "status.updateTime"


def test_conditions_need_a_type_and_a_known_status_and_are_keyed_by_type() -> None:
    causes = validate_status({"conditions": [{"status": "Maybe"}]})
    assert by_field(causes).keys() == {"status.conditions[0].type", "status.conditions[0].status"}
    assert validate_status({"conditions": [{"type": "Ready", "status": "True"},
                                           {"type": "Ready", "status": "False"}]}) == [
        Cause("FieldValueDuplicate", 'Duplicate value: "Ready"', "status.conditions[1].type")]


def test_status_nodes_and_port_are_checked() -> None:
    causes = by_field(validate_status({"nodes": [{"phase": "Gone"}], "port": 0, "observedGeneration": -1}))
    assert causes.keys() == {"status.nodes[0].name", "status.nodes[0].phase", "status.port",
                             "status.observedGeneration"}


# --------------------------------------------------------------------------- unknown fields


def test_unknown_fields_are_reported_with_kube_paths() -> None:
    obj = {
        "apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "extra": 1,
        "metadata": {"name": "a", "foo": 1, "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:x": {}},
                                                               "bar": 1}]},
        "spec": {"foo": 1, "pluginSet": {}, "promotePolicies": [
            {"nodeCount": 1, "bar": 2, "labelSelector": {"matchLabels": {"any": "key"}, "x": 1,
                                                         "matchExpressions": [{"key": "k", "operator": "Exists",
                                                                               "y": 0}]}}]},
        "status": {"portMap": {"a": 1}, "conditions": [{"type": "Ready", "status": "True", "z": 1}]},
    }
    assert unknown_fields(obj) == [
        "extra", "metadata.foo", "metadata.managedFields[0].bar", "spec.foo", "spec.pluginSet",
        "spec.promotePolicies[0].bar", "spec.promotePolicies[0].labelSelector.x",
        "spec.promotePolicies[0].labelSelector.matchExpressions[0].y", "status.portMap",
        "status.conditions[0].z"]


def test_map_valued_fields_accept_any_keys() -> None:
    obj = {"metadata": {"labels": {"a/b": "c", "x": "y"}, "annotations": {"anything goes": "here"}},
           "spec": {"promoteResources": {"resources": {"cpu": 1, "example.com/thing": 2}},
                    "promotePolicies": [{"nodeCount": 1, "labelSelector": {"matchLabels": {"k": "v"}}}]}}
    assert unknown_fields(obj) == []


def test_every_object_meta_field_is_known() -> None:
    meta = {name: None for name in (
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
        "ownerReferences", "finalizers", "managedFields")}
    assert unknown_fields({"metadata": meta}) == []


def test_wrongly_typed_containers_hide_no_unknown_fields_and_do_not_crash() -> None:
    assert unknown_fields({"spec": "x", "metadata": [], "status": {"nodes": "n"}}) == []


def test_pruning_drops_exactly_the_unknown_fields() -> None:
    obj = {"kind": "VirtualCluster", "bogus": 1, "spec": {"foo": 1, "promotePolicies": [{"nodeCount": 1, "x": 2}]}}
    prune_unknown_fields(obj)
    assert obj == {"kind": "VirtualCluster", "spec": {"promotePolicies": [{"nodeCount": 1}]}}


# --------------------------------------------------------------------------- declarations


def _all_fields(schema_cls: type[KubeSchema]) -> list[tuple[str, fields.Field]]:
    return [(f"{schema_cls.__name__}.{name}", fld) for name, fld in schema_cls().fields.items()]


def test_every_schema_field_carries_a_real_description() -> None:
    schemas = iter_schemas([VirtualClusterSchema, VirtualClusterListSchema])
    missing = [name for cls in schemas for name, fld in _all_fields(cls)
               if len(fld.metadata.get("description", "")) < 15]
    assert missing == []
    assert all(len(cls.DESCRIPTION) > 15 for cls in schemas)


def test_the_spec_schema_declares_every_field_of_the_contract() -> None:
    spec = {name for name, _ in _all_fields(iter_schemas([VirtualClusterSchema])[0])}
    assert {"VirtualClusterSchema." + f for f in ("apiVersion", "kind", "metadata", "spec", "status")} == spec
    from apiserver.apis.schema import (
        BackupSchema,
        BackupStatusSchema,
        HibernationSchema,
        KubeInKubeConfigSchema,
        NodeStatusSchema,
        PromoteResourcesSchema,
        RestoreFromSchema,
        SharedResourcesSchema,
        VirtualClusterSpecSchema,
        VirtualClusterStatusSchema,
    )

    assert {f.data_key or a for a, f in VirtualClusterSpecSchema().fields.items()} == {
        "externalIP", "externalIps", "promotePolicies", "promoteResources", "kubeInKubeConfig", "kubeconfig",
        "credentials", "import", "hibernation", "backup", "restoreFrom", "kubernetesVersion"}
    assert set(RestoreFromSchema().fields) == {"virtualCluster", "snapshot"}
    assert set(HibernationSchema().fields) == {"hibernated", "afterInactivity", "wakeOnAccess"}
    assert set(BackupSchema().fields) == {"schedule", "keep"}
    assert set(BackupStatusSchema().fields) == {"name", "time", "revision", "sizeBytes", "verified", "reason"}
    assert set(KubeInKubeConfigSchema().fields) == {
        "apiServerReplicas", "apiServerServiceType", "externalPort", "forceDestroy", "etcdStorageClass",
        "etcdUnitSize", "clusterCIDR"}
    assert set(PromoteResourcesSchema().fields) == {"nodes", "nodeInfos", "resources", "resourcesMode"}
    assert set(VirtualClusterStatusSchema().fields) == {
        "phase", "reason", "message", "updateTime", "observedGeneration", "conditions", "controlPlaneEndpoint",
        "port", "kubernetesVersion", "upgrade", "nodes", "sharedResources", "backups", "credentials"}
    assert set(NodeStatusSchema().fields) == {"name", "phase", "shared"}
    assert set(SharedResourcesSchema().fields) == {"namespace", "capacity", "used"}


# --------------------------------------------------------------------------- the fast path


ODD_VALUES: list[Any] = [None, 0, -1, 1.5, 2**40, 2**70, True, "", "x", "-1", "10Gi", "1.2.3.4", "a/b", "Ab_",
                         "z" * 300, [], [None], ["a", "a"], {}, {"k": None}, {"k": "v"}, {"bad key!": "v"}]


def _mutations(value: Any, path: tuple[Any, ...] = ()) -> Any:
    """Every (path, odd value) replacement of every node of ``value``, plus a deletion per key."""
    yield path, None
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _mutations(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _mutations(sub, (*path, i))


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


RICH_SPEC: dict[str, Any] = {
    "externalIP": "10.0.0.1", "externalIps": ["vc.example.com"],
    "promotePolicies": [{"labelSelector": {"matchLabels": {"zone": "a"}}, "nodeCount": 2}],
    "promoteResources": {"nodes": ["n1"], "nodeInfos": [{"nodeName": "n2"}], "resources": {"cpu": "8", "memory": 1},
                         "resourcesMode": "Shared"},
    "kubeInKubeConfig": {"apiServerReplicas": 1, "apiServerServiceType": "nodePort", "externalPort": 30443,
                         "forceDestroy": False, "etcdUnitSize": "1Gi", "clusterCIDR": "10.244.0.0/16"},
}
RICH_STATUS: dict[str, Any] = {
    "phase": "Completed", "reason": "Ready", "message": "m", "updateTime": "2026-11-22T00:00:00Z",
    "observedGeneration": 1, "controlPlaneEndpoint": "https://127.0.0.1:6443", "port": 6443,
    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-22T00:00:00Z",
                    "observedGeneration": 1}],
    "nodes": [{"name": "n1", "phase": "Ready"}, {"name": "kosmos-shared-0", "phase": "Ready", "shared": True}],
    "sharedResources": {"namespace": "vcw-ns-vc-abc123", "capacity": {"cpu": "8", "memory": 1},
                        "used": {"cpu": "500m"}},
}


@pytest.mark.parametrize(("schema_name", "document"), [("spec", RICH_SPEC), ("status", RICH_STATUS)])
def test_the_fast_path_accepts_only_what_marshmallow_accepts(schema_name: str, document: dict[str, Any]) -> None:
    """Differential: each node of a valid document replaced by each odd value; whatever the fast path
    accepts must load cleanly through marshmallow, and what marshmallow accepts the fast path should too."""
    from apiserver.apis import schema
    from apiserver.machinery import fields as kubefields

    loader = schema._SPEC if schema_name == "spec" else schema._STATUS
    assert kubefields.accepts(loader, document)
    disagreements = []
    checked = 0
    for path, _ in _mutations(document):
        for odd in ODD_VALUES:
            candidate = _replaced(document, path, odd)
            if not isinstance(candidate, dict):
                continue
            try:
                loader.load(candidate)
                marshmallow_ok = True
            except Exception:
                marshmallow_ok = False
            checked += 1
            if kubefields.accepts(loader, candidate) != marshmallow_ok:
                disagreements.append((path, odd, marshmallow_ok))
    assert checked > 300
    assert disagreements == []
    assert kubefields.accepts(loader, document)  # still fast once marshmallow has loaded (and filled its hook table)


def test_declared_fields_are_stored_in_their_declared_type_as_kube_stores_a_custom_resource() -> None:
    obj = {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
           "metadata": {"name": "typed", "labels": None},
           "spec": {"promoteResources": None},
           "status": {"port": 100.0, "nodes": [{"name": "n1", "phase": None}]}}
    assert prune_unknown_fields(obj) == []
    assert obj["status"]["port"] == 100 and type(obj["status"]["port"]) is int
    assert obj["status"]["nodes"] == [{"name": "n1"}]
    assert "labels" not in obj["metadata"] and "promoteResources" not in obj["spec"]


def test_restore_from_needs_both_names_and_each_must_be_a_valid_name() -> None:
    from apiserver.apis.schema import validate_spec

    assert [(c.field, c.message) for c in validate_spec({"restoreFrom": {}})] == [
        ("spec.restoreFrom.virtualCluster", "Required value"), ("spec.restoreFrom.snapshot", "Required value")]
    causes = validate_spec({"restoreFrom": {"virtualCluster": "Prod", "snapshot": "../etc"}})
    assert [c.field for c in causes] == ["spec.restoreFrom.virtualCluster", "spec.restoreFrom.snapshot"]
    assert causes[0].message.startswith('Invalid value: "Prod": a lowercase RFC 1123 label must consist of')
    assert causes[1].message.startswith('Invalid value: "../etc": a lowercase RFC 1123 subdomain must consist of')
    assert validate_spec({"restoreFrom": {"virtualCluster": "prod", "snapshot": "prod-20261125-114000"}}) == []
