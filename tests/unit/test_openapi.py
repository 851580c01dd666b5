"""The published OpenAPI documents: shapes kubectl and the aggregator rely on, derived from the schema."""

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from apiserver.apis.schema import VirtualClusterSpecSchema
from apiserver.endpoints.openapi import (
    PATCH_CONTENT_TYPES,
    document_hash,
    openapi_v2,
    openapi_v3,
    openapi_v3_discovery,
    openapi_v3_hash,
)
from apiserver.endpoints.patch import ACCEPTED

ROOT = "/apis/kosmos.io/v1alpha1"
COLLECTION = f"{ROOT}/namespaces/{{namespace}}/virtualclusters"
ITEM = f"{COLLECTION}/{{name}}"
VC = "io.kosmos.v1alpha1.VirtualCluster"
GVK = {"group": "kosmos.io", "version": "v1alpha1", "kind": "VirtualCluster"}
CREDENTIALS = f"{ROOT}/namespaces/{{namespace}}/virtualclustercredentials"
CREDENTIAL = f"{CREDENTIALS}/{{name}}"
ACTIONS = {"get", "list", "post", "put", "patch", "delete", "deletecollection"}
METHODS = ("get", "put", "post", "delete", "patch")
APIMACHINERY = [f"io.k8s.apimachinery.pkg.apis.meta.v1.{name}" for name in (
    "ObjectMeta", "ListMeta", "LabelSelector", "LabelSelectorRequirement", "Time", "Status", "StatusDetails",
    "StatusCause", "DeleteOptions", "Preconditions", "ManagedFieldsEntry", "OwnerReference", "WatchEvent",
    "Patch")] + ["io.k8s.apimachinery.pkg.api.resource.Quantity"]

DOCS = {"v2": openapi_v2(), "v3": openapi_v3()}


def definitions(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["components"]["schemas"] if "openapi" in doc else doc["definitions"]


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def param_names(doc: dict[str, Any], path: str, method: str) -> set[str]:
    item = doc["paths"][path]
    return {p["name"] for p in item[method].get("parameters", []) + item.get("parameters", [])}


both = pytest.mark.parametrize("version", ["v2", "v3"])


# --------------------------------------------------------------------------- documents


@both
def test_every_ref_resolves_inside_the_same_document(version: str) -> None:
    doc = DOCS[version]
    prefix = "#/components/schemas/" if version == "v3" else "#/definitions/"
    found = list(refs(doc))
    assert found
    assert [r for r in found if not r.startswith(prefix) or r[len(prefix):] not in definitions(doc)] == []


@both
def test_every_schema_property_has_a_description(version: str) -> None:
    missing = [f"{name}.{prop}" for name, schema in definitions(DOCS[version]).items()
               for prop, body in schema.get("properties", {}).items() if not body.get("description")]
    assert missing == []
    assert [name for name, schema in definitions(DOCS[version]).items() if not schema.get("description")] == []


@both
def test_every_parameter_and_operation_has_a_description(version: str) -> None:
    doc = DOCS[version]
    for path, method, op in operations(doc):
        assert op["description"], (path, method)
        for param in op.get("parameters", []) + doc["paths"][path].get("parameters", []):
            assert param.get("description") or param["in"] == "body", (path, method, param)


@both
def test_the_kube_apimachinery_definitions_are_included_under_kubes_names(version: str) -> None:
    assert set(APIMACHINERY) <= set(definitions(DOCS[version]))


@both
def test_the_resource_definitions_carry_their_group_version_kind_as_a_list(version: str) -> None:
    defs = definitions(DOCS[version])
    assert defs[VC]["x-kubernetes-group-version-kind"] == [GVK]
    assert defs[f"{VC}List"]["x-kubernetes-group-version-kind"] == [{**GVK, "kind": "VirtualClusterList"}]
    assert {"io.kosmos.v1alpha1.VirtualClusterSpec", "io.kosmos.v1alpha1.VirtualClusterStatus"} <= set(defs)


@both
def test_the_object_references_object_meta_spec_and_status(version: str) -> None:
    props = definitions(DOCS[version])[VC]["properties"]
    assert props["metadata"]["$ref"].endswith("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert props["spec"]["$ref"].endswith("io.kosmos.v1alpha1.VirtualClusterSpec")
    assert props["status"]["$ref"].endswith("io.kosmos.v1alpha1.VirtualClusterStatus")


def test_the_spec_definition_is_generated_from_the_marshmallow_schema() -> None:
    spec = definitions(DOCS["v3"])["io.kosmos.v1alpha1.VirtualClusterSpec"]
    declared = {fld.data_key or attr: fld for attr, fld in VirtualClusterSpecSchema().fields.items()}
    assert set(spec["properties"]) == set(declared)
    for name, fld in declared.items():
        assert spec["properties"][name]["description"] == fld.metadata["description"]


def test_validation_rules_are_published_as_constraints() -> None:
    defs = definitions(DOCS["v3"])
    policy = defs["io.kosmos.v1alpha1.PromotePolicy"]
    assert policy["required"] == ["nodeCount"]
    assert policy["properties"]["nodeCount"] | {"description": ""} == {
        "type": "integer", "format": "int32", "minimum": 0, "description": ""}
    config = defs["io.kosmos.v1alpha1.KubeInKubeConfig"]["properties"]
    assert config["apiServerServiceType"]["enum"] == ["nodePort", "hostNetwork"]
    assert (config["externalPort"]["minimum"], config["externalPort"]["maximum"]) == (1, 65535)
    operator = defs["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement"]["properties"]["operator"]
    assert operator["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]


def test_maps_publish_their_value_type() -> None:
    resources = definitions(DOCS["v3"])["io.kosmos.v1alpha1.PromoteResources"]["properties"]["resources"]
    assert resources["type"] == "object"
    assert resources["additionalProperties"]["$ref"] == (
        "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity")


def test_quantity_is_int_or_string_in_v3_and_a_string_in_v2_like_kube() -> None:
    name = "io.k8s.apimachinery.pkg.api.resource.Quantity"
    assert definitions(DOCS["v3"])[name]["oneOf"] == [{"type": "string"}, {"type": "number"}]
    assert definitions(DOCS["v2"])[name]["type"] == "string"


@both
def test_documents_are_plain_json(version: str) -> None:
    assert orjson.loads(orjson.dumps(DOCS[version])) == DOCS[version]


def test_callers_get_independent_copies() -> None:
    doc = openapi_v3()
    doc["paths"].clear()
    assert openapi_v3()["paths"]


def test_document_versions_are_declared() -> None:
    assert DOCS["v2"]["swagger"] == "2.0"
    assert DOCS["v3"]["openapi"].startswith("3.0")


# --------------------------------------------------------------------------- paths and operations


@both
def test_all_resource_paths_are_published(version: str) -> None:
    assert set(DOCS[version]["paths"]) == {
        f"{ROOT}/", f"{ROOT}/virtualclusters", COLLECTION, ITEM, f"{ITEM}/status", f"{ITEM}/kubeconfig",
        f"{ITEM}/credentials", f"{ROOT}/virtualclustercredentials", CREDENTIALS, CREDENTIAL}


@both
def test_operations_have_kube_style_ids(version: str) -> None:
    ids = {(path, method): op["operationId"] for path, method, op in operations(DOCS[version])}
    assert ids == {
        (f"{ROOT}/", "get"): "getKosmosIoV1alpha1APIResources",
        (f"{ROOT}/virtualclusters", "get"): "listKosmosIoV1alpha1VirtualClusterForAllNamespaces",
        (COLLECTION, "get"): "listKosmosIoV1alpha1NamespacedVirtualCluster",
        (COLLECTION, "post"): "createKosmosIoV1alpha1NamespacedVirtualCluster",
        (COLLECTION, "delete"): "deleteKosmosIoV1alpha1CollectionNamespacedVirtualCluster",
        (ITEM, "get"): "readKosmosIoV1alpha1NamespacedVirtualCluster",
        (ITEM, "put"): "replaceKosmosIoV1alpha1NamespacedVirtualCluster",
        (ITEM, "patch"): "patchKosmosIoV1alpha1NamespacedVirtualCluster",
        (ITEM, "delete"): "deleteKosmosIoV1alpha1NamespacedVirtualCluster",
        (f"{ITEM}/status", "get"): "readKosmosIoV1alpha1NamespacedVirtualClusterStatus",
        (f"{ITEM}/status", "put"): "replaceKosmosIoV1alpha1NamespacedVirtualClusterStatus",
        (f"{ITEM}/status", "patch"): "patchKosmosIoV1alpha1NamespacedVirtualClusterStatus",
        (f"{ITEM}/kubeconfig", "get"): "readKosmosIoV1alpha1NamespacedVirtualClusterKubeconfig",
        (f"{ITEM}/credentials", "get"): "readKosmosIoV1alpha1NamespacedVirtualClusterCredentials",
        (f"{ROOT}/virtualclustercredentials", "get"):
            "listKosmosIoV1alpha1VirtualClusterCredentialForAllNamespaces",
        (CREDENTIALS, "get"): "listKosmosIoV1alpha1NamespacedVirtualClusterCredential",
        (CREDENTIALS, "delete"): "deleteKosmosIoV1alpha1CollectionNamespacedVirtualClusterCredential",
        (CREDENTIAL, "get"): "readKosmosIoV1alpha1NamespacedVirtualClusterCredential",
        (CREDENTIAL, "delete"): "deleteKosmosIoV1alpha1NamespacedVirtualClusterCredential",
    }


@both
def test_resource_operations_carry_an_action_and_the_gvk_as_an_object(version: str) -> None:
    for path, method, op in operations(DOCS[version]):
        assert op["tags"] == ["kosmosIo_v1alpha1"]
        if path == f"{ROOT}/":
            continue
        assert op["x-kubernetes-action"] in ACTIONS, (path, method)
        kind = "VirtualClusterCredential" if "virtualclustercredentials" in path else "VirtualCluster"
        assert op["x-kubernetes-group-version-kind"] == {**GVK, "kind": kind}, (path, method)
    paths = DOCS[version]["paths"]
    assert paths[COLLECTION]["get"]["x-kubernetes-action"] == "list"
    assert paths[COLLECTION]["delete"]["x-kubernetes-action"] == "deletecollection"
    assert paths[ITEM]["put"]["x-kubernetes-action"] == "put"


@both
def test_writes_advertise_field_validation_dry_run_and_field_manager(version: str) -> None:
    doc = DOCS[version]
    for path, method in [(COLLECTION, "post"), (ITEM, "put"), (ITEM, "patch"), (f"{ITEM}/status", "put"),
                         (f"{ITEM}/status", "patch")]:
        # kubectl looks for fieldValidation among the operation's own parameters.
        assert {"fieldValidation", "dryRun", "fieldManager"} <= {p["name"] for p in doc["paths"][path][method][
            "parameters"]}, (path, method)
    assert "force" in param_names(doc, ITEM, "patch")
    assert "force" not in param_names(doc, ITEM, "put")


@both
def test_lists_deletes_and_kubeconfig_take_kubes_query_parameters(version: str) -> None:
    doc = DOCS[version]
    listing = {"allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion",
               "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch", "pretty"}
    assert listing <= param_names(doc, COLLECTION, "get")
    assert listing <= param_names(doc, f"{ROOT}/virtualclusters", "get")
    deleting = {"gracePeriodSeconds", "propagationPolicy", "orphanDependents", "dryRun"}
    assert deleting <= param_names(doc, ITEM, "delete")
    assert deleting | (listing - {"watch", "allowWatchBookmarks"}) <= param_names(doc, COLLECTION, "delete")
    assert {"expirationSeconds", "name", "namespace"} <= param_names(doc, f"{ITEM}/kubeconfig", "get")


@both
def test_path_parameters_are_required(version: str) -> None:
    for param in DOCS[version]["paths"][ITEM]["parameters"]:
        assert param.get("required", False) is (param["in"] == "path")


def test_patch_request_bodies_are_the_three_a_crd_lists() -> None:
    assert PATCH_CONTENT_TYPES == ("application/json-patch+json", "application/merge-patch+json",
                                   "application/apply-patch+yaml")
    for path in (ITEM, f"{ITEM}/status"):
        body = DOCS["v3"]["paths"][path]["patch"]["requestBody"]
        assert list(body["content"]) == sorted(PATCH_CONTENT_TYPES)
        assert body["content"]["application/merge-patch+json"]["schema"]["$ref"].endswith("meta.v1.Patch")
        assert DOCS["v2"]["paths"][path]["patch"]["consumes"] == list(PATCH_CONTENT_TYPES)


def test_advertised_patch_types_are_the_ones_the_patch_module_accepts() -> None:
    assert PATCH_CONTENT_TYPES is ACCEPTED


@both
def test_strategic_merge_patches_are_not_advertised(version: str) -> None:
    text = orjson.dumps(DOCS[version]).decode()
    assert "strategic-merge-patch" not in text


@both
def test_responses_reference_the_right_types(version: str) -> None:
    paths = DOCS[version]["paths"]

    def schema(path: str, method: str, code: str) -> dict[str, Any]:
        response = paths[path][method]["responses"][code]
        return response["schema"] if version == "v2" else response["content"]["application/json"]["schema"]

    assert schema(COLLECTION, "get", "200")["$ref"].endswith(f"{VC}List")
    assert {code for code in paths[COLLECTION]["post"]["responses"]} == {"200", "201", "202", "401"}
    assert schema(COLLECTION, "post", "201")["$ref"].endswith(VC)
    assert schema(COLLECTION, "delete", "200")["$ref"].endswith("meta.v1.Status")
    assert schema(ITEM, "get", "200")["$ref"].endswith(VC)
    assert schema(f"{ROOT}/", "get", "200")["$ref"].endswith("meta.v1.APIResourceList")
    kubeconfig = schema(f"{ITEM}/kubeconfig", "get", "200")
    assert kubeconfig["type"] == "object"
    assert "kubeconfig" in kubeconfig["description"]
    assert all(op["responses"]["401"] == {"description": "Unauthorized"} for _, _, op in operations(DOCS[version]))


def test_v3_create_and_replace_take_a_virtual_cluster_body() -> None:
    for path, method in [(COLLECTION, "post"), (ITEM, "put"), (f"{ITEM}/status", "put")]:
        body = DOCS["v3"]["paths"][path][method]["requestBody"]
        assert body["required"] is True
        assert [s["schema"]["$ref"] for s in body["content"].values()] == [f"#/components/schemas/{VC}"]


def test_lists_can_be_watched_as_a_stream() -> None:
    content = DOCS["v3"]["paths"][COLLECTION]["get"]["responses"]["200"]["content"]
    assert "application/json;stream=watch" in content


# --------------------------------------------------------------------------- discovery and hash


def test_v3_discovery_points_at_the_group_version_with_its_hash() -> None:
    assert openapi_v3_discovery("ABC") == {"paths": {"apis/kosmos.io/v1alpha1": {
        "serverRelativeURL": "/openapi/v3/apis/kosmos.io/v1alpha1?hash=ABC"}}}


def test_the_v3_hash_is_uppercase_sha512_hex_and_stable() -> None:
    digest = openapi_v3_hash()
    assert len(digest) == 128
    assert digest == digest.upper()
    int(digest, 16)
    assert digest == openapi_v3_hash() == openapi_v3_hash(openapi_v3()) == document_hash(openapi_v3())


def test_the_hash_changes_when_the_document_changes() -> None:
    doc = openapi_v3()
    doc["info"]["version"] = "other"
    assert openapi_v3_hash(doc) != openapi_v3_hash()


def test_the_hash_ignores_key_order() -> None:
    assert document_hash({"a": 1, "b": {"c": 2, "d": 3}}) == document_hash({"b": {"d": 3, "c": 2}, "a": 1})


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_the_merge_structure_is_published_where_the_schema_declares_it(version: str) -> None:
    """x-kubernetes-list-type / -list-map-keys / -map-type, as kube publishes them for the CRD
    (tests/e2e/test_managedfields_differential.py compares with kube-apiserver itself)."""
    defs = definitions(DOCS[version])
    meta, spec, status = (defs[f"{name}"] for name in (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", f"{VC}Spec", f"{VC}Status"))
    assert meta["properties"]["finalizers"]["x-kubernetes-list-type"] == "set"
    assert meta["properties"]["ownerReferences"]["x-kubernetes-list-type"] == "map"
    assert meta["properties"]["ownerReferences"]["x-kubernetes-list-map-keys"] == ["uid"]
    assert meta["properties"]["managedFields"]["x-kubernetes-list-type"] == "atomic"
    assert defs["io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"]["x-kubernetes-map-type"] == "atomic"
    assert status["properties"]["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    # An undeclared list is atomic, and kube omits the default.
    assert "x-kubernetes-list-type" not in spec["properties"]["externalIps"]


def _merge_structure(node: Any, path: str, defs: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """Every merge extension under a schema node by property path, following $refs into defs."""
    if not isinstance(node, dict):
        return out
    ref = node.get("$ref")
    if ref:
        _merge_structure(defs[ref.rsplit("/", 1)[-1]], path, defs, out)
    found = {k: v for k, v in node.items() if k.startswith(("x-kubernetes-list", "x-kubernetes-map"))}
    if found:
        out.setdefault(path, {}).update(found)
    for key, prop in node.get("properties", {}).items():
        _merge_structure(prop, f"{path}.{key}", defs, out)
    _merge_structure(node.get("items"), f"{path}[]", defs, out)
    _merge_structure(node.get("additionalProperties"), f"{path}{{}}", defs, out)
    return out


def test_the_crd_carries_the_same_merge_structure_as_the_openapi_documents() -> None:
    from bench.crd import virtualcluster_crd

    crd = virtualcluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    defs = definitions(DOCS["v3"])
    ours = _merge_structure(defs[VC], "", defs, {})
    crd_found = _merge_structure(crd, "", {}, {})
    assert crd_found, "the CRD declares list types"
    # The CRD leaves metadata to kube (its own ObjectMeta); everything else is the same.
    assert crd_found == {p: e for p, e in ours.items() if not p.startswith(".metadata")}


@both
def test_resources_mode_is_published_as_an_enum_with_its_default(version: str) -> None:
    props = definitions(DOCS[version])["io.kosmos.v1alpha1.PromoteResources"]["properties"]
    mode = props["resourcesMode"]
    assert (mode["type"], mode["enum"], mode["default"]) == ("string", ["Dedicated", "Shared"], "Shared")
    assert "Shared (the default)" in mode["description"] and "Dedicated" in mode["description"]
    assert "shared host" in props["resources"]["description"]


@both
def test_status_publishes_the_shared_slice_and_shared_nodes(version: str) -> None:
    defs = definitions(DOCS[version])
    status = defs["io.kosmos.v1alpha1.VirtualClusterStatus"]["properties"]
    assert status["sharedResources"]["$ref"].endswith("io.kosmos.v1alpha1.VirtualClusterSharedResources")
    shared = defs["io.kosmos.v1alpha1.VirtualClusterSharedResources"]["properties"]
    assert set(shared) == {"namespace", "capacity", "used"}
    assert shared["namespace"]["type"] == "string"
    for name in ("capacity", "used"):
        assert shared[name]["type"] == "object"
        assert shared[name]["additionalProperties"]["$ref"].endswith("io.k8s.apimachinery.pkg.api.resource.Quantity")
    node = defs["io.kosmos.v1alpha1.VirtualClusterNode"]["properties"]
    assert node["shared"]["type"] == "boolean"


def test_the_crd_defaults_resources_mode_and_takes_slice_quantities_as_int_or_string() -> None:
    from bench.crd import virtualcluster_crd

    crd = virtualcluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    mode = crd["properties"]["spec"]["properties"]["promoteResources"]["properties"]["resourcesMode"]
    assert (mode["enum"], mode["default"]) == (["Dedicated", "Shared"], "Shared")
    shared = crd["properties"]["status"]["properties"]["sharedResources"]["properties"]
    for name in ("capacity", "used"):
        assert shared[name]["additionalProperties"]["x-kubernetes-int-or-string"] is True
    nodes = crd["properties"]["status"]["properties"]["nodes"]
    assert nodes["items"]["properties"]["shared"]["type"] == "boolean"
