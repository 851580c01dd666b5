"""managedFields, differentially: the same non-apply writes, with the same field managers, sent to
kube-apiserver serving VirtualClusters as the CRD generated from our schema (``bench/crd.py``) and
to vc-apiserver; after every step both must answer the same code and carry the same entries
(manager, operation, apiVersion, subresource, fieldsV1, whether there is a time), times and
resourceVersions aside. Intended differences that show in these objects (the finalizer we add on
create) are outside managedFields: no one owns them."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.support.differential import BASELINE, OURS, Client, DifferentialLab

NS = "mf"
MERGE, JSON_PATCH = "application/merge-patch+json", "application/json-patch+json"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def clients(differential_lab: DifferentialLab) -> dict[str, Client]:
    differential_lab.namespace(NS)
    return {name: differential_lab.clients[name] for name in (BASELINE, OURS)}


def entries(obj: Obj) -> list[tuple[Any, ...]]:
    """The entries to compare: everything but the time's value, in a stable order (entries of
    different seconds sort by time, which two servers need not share)."""
    return sorted((e["manager"], e["operation"], e["apiVersion"], e.get("subresource", ""), e["fieldsType"],
                   json.dumps(e["fieldsV1"], sort_keys=True), "time" in e)
                  for e in obj.get("metadata", {}).get("managedFields", []))


def both(clients: dict[str, Client], step: Any) -> dict[str, tuple[int, Obj]]:
    """Run ``step(client)`` against the CRD and against us; the answers must agree on code and entries."""
    out = {name: step(client) for name, client in clients.items()}
    (kube_code, kube_body), (our_code, our_body) = out["baseline"], out["ours"]
    assert our_code == kube_code, (kube_body, our_body)
    if kube_body.get("kind") == "Status":
        assert our_body.get("reason") == kube_body.get("reason"), (kube_body, our_body)
        assert our_body.get("message") == kube_body.get("message"), (kube_body, our_body)
        # kube validates ObjectMeta up to three times on an update (BeforeUpdate's common fields, then
        # the CR strategy) and lists each cause as often; we list it once (an intended difference).
        causes = {(c.get("reason"), c.get("field"), c.get("message"))
                  for c in (kube_body.get("details") or {}).get("causes", [])}
        assert {(c.get("reason"), c.get("field"), c.get("message"))
                for c in (our_body.get("details") or {}).get("causes", [])} == causes, (kube_body, our_body)
    else:
        assert entries(our_body) == entries(kube_body), json.dumps(
            {"kube": kube_body["metadata"].get("managedFields"), "ours": our_body["metadata"].get("managedFields")},
            indent=1)
    return out


def get(client: Client, name: str) -> Obj:
    code, obj = client.send("GET", f"/{name}")
    assert code == 200, obj
    return obj


def manifest(name: str) -> Obj:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "labels": {"team": "a"}, "finalizers": ["example.com/hold"]},
            "spec": {"externalIps": ["10.0.0.2", "10.0.0.1"], "promotePolicies": [{"nodeCount": 1}],
                     "promoteResources": {"resources": {"cpu": "4"}}, "kubeInKubeConfig": {"apiServerReplicas": 1}},
            "status": {"phase": "Pending"}}


def test_every_kind_of_write_leaves_the_entries_kube_leaves(clients: dict[str, Client]) -> None:
    name = "writes"
    both(clients, lambda c: c.send("POST", "", manifest(name), fieldManager="kubectl-create"))

    def replace(c: Client) -> tuple[int, Obj]:
        obj = get(c, name)
        obj["spec"]["kubeconfig"] = "a"
        obj["metadata"]["labels"]["tier"] = "gold"
        return c.send("PUT", f"/{name}", obj, fieldManager="kubectl-replace")
    both(clients, replace)
    both(clients, lambda c: c.send("PATCH", f"/{name}", {
        "metadata": {"annotations": {"note": "x"}}, "spec": {"kubeInKubeConfig": {"apiServerReplicas": 3}}},
        MERGE, fieldManager="kubectl-patch"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", [
        {"op": "add", "path": "/spec/promoteResources/nodes", "value": ["n1", "n2"]},
        {"op": "replace", "path": "/spec/kubeconfig", "value": "b"}], JSON_PATCH, fieldManager="json-patcher"))

    def status(c: Client) -> tuple[int, Obj]:
        obj = get(c, name)
        obj["status"] = {"phase": "Preparing", "conditions": [{"type": "Ready", "status": "False"}]}
        obj["spec"]["kubeconfig"] = "ignored on /status"
        return c.send("PUT", f"/{name}/status", obj, fieldManager="vc-controller")
    both(clients, status)
    both(clients, lambda c: c.send("PATCH", f"/{name}/status", {"status": {"conditions": [
        {"type": "Ready", "status": "True"}, {"type": "NodesReady", "status": "True"}]}}, MERGE,
        fieldManager="vc-controller"))
    # The main resource's manager of the same name is another entry; status there is not recorded.
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"labels": {"by": "controller"}},
                                                          "status": {"phase": "Completed"}}, MERGE,
                                   fieldManager="vc-controller"))
    # An owner reference is an atomic struct: its item is owned whole.
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "6b1b7a4e-0000-4000-8000-000000000001"}]}},
        MERGE, fieldManager="gc"))
    # Removing fields takes them from every entry; an entry left empty goes.
    both(clients, lambda c: c.send("PATCH", f"/{name}", [{"op": "remove", "path": "/metadata/annotations"}],
                                   JSON_PATCH, fieldManager="cleaner"))


def test_the_manager_is_named_after_the_user_agent_when_not_given(clients: dict[str, Client]) -> None:
    name = "agents"
    both(clients, lambda c: c.send("POST", "", manifest(name), user_agent="Go-http-client/1.1"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"labels": {"x": "1"}}}, MERGE,
                                   user_agent="kubectl/v1.35.4 (linux/amd64) kubernetes/abcdef"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"labels": {"y": "1"}}}, MERGE,
                                   user_agent=""))


def test_a_no_op_write_changes_no_entry_and_no_resource_version(clients: dict[str, Client]) -> None:
    name = "noop"
    created = both(clients, lambda c: c.send("POST", "", manifest(name), fieldManager="creator"))
    after = both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"labels": {"team": "a"}}}, MERGE,
                                           fieldManager="someone-else"))
    for server in ("baseline", "ours"):
        assert after[server][1]["metadata"]["resourceVersion"] == created[server][1]["metadata"]["resourceVersion"]
        assert after[server][1]["metadata"]["managedFields"] == created[server][1]["metadata"]["managedFields"]


def test_user_written_managed_fields_are_kept_ignored_reset_or_refused_as_kube_does(
        clients: dict[str, Client]) -> None:
    name = "userwritten"
    both(clients, lambda c: c.send("POST", "", manifest(name), fieldManager="creator"))
    entry = {"manager": "renamed", "operation": "Update", "apiVersion": "kosmos.io/v1alpha1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:kubeconfig": {}}}}
    # A decodable list becomes the new baseline (how kubectl and Flux rename and fold entries).
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [entry]},
                                                         "spec": {"kubeconfig": "a"}}, MERGE, fieldManager="m1"))
    # One that does not decode is ignored: the live entries stay, the write is tracked.
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [
        {**entry, "operation": "Foo"}]}, "spec": {"kubeconfig": "b"}}, MERGE, fieldManager="m2"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [
        {**entry, "fieldsV1": {"f:spec": 1}}]}, "spec": {"kubeconfig": "c"}}, MERGE, fieldManager="m3"))
    # Decodable but invalid: 422 from ObjectMeta validation.
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [
        {**entry, "manager": "m" * 129}]}}, MERGE, fieldManager="m4"))
    # An entry of an apiVersion the resource does not serve fails the tracking of the write that
    # brings it: the object is written without managedFields (and stays untracked).
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [
        entry, {**entry, "manager": "old-writer", "apiVersion": "kosmos.io/v1alpha2"}]}}, MERGE, fieldManager="m4"))
    elsewhere = manifest("userwritten-v2")
    elsewhere["metadata"]["managedFields"] = [{**entry, "apiVersion": "kosmos.io/v1beta1"}]
    created = both(clients, lambda c: c.send("POST", "", elsewhere, fieldManager="creator"))
    assert "managedFields" not in created["ours"][1]["metadata"]
    # [{}] resets: no entries, and later updates stay untracked.
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [{}]}}, MERGE,
                                   fieldManager="m5"))
    out = both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {"kubeconfig": "d"}}, MERGE,
                                         fieldManager="m6"))
    assert "managedFields" not in out["ours"][1]["metadata"]


def test_empty_labels_annotations_finalizers_and_generate_name_are_dropped_as_kube_drops_them(
        clients: dict[str, Client]) -> None:
    """kube-apiserver round-trips a custom resource's metadata through the typed ObjectMeta, which
    leaves out what is empty: no one owns it, and emptying a map by a patch removes it whole."""
    name = "empty-meta"
    body = manifest(name)
    body["metadata"].update(labels={}, annotations={"a": "b"}, finalizers=[], generateName="")
    result = both(clients, lambda c: c.send("POST", "", body, fieldManager="creator"))
    for _, obj in result.values():
        assert {"labels", "generateName"}.isdisjoint(obj["metadata"]), obj["metadata"]
    result = both(clients, lambda c: c.send("PATCH", f"/{name}", [{"op": "remove", "path": "/metadata/annotations/a"}],
                                            JSON_PATCH, fieldManager="remover"))
    for _, obj in result.values():
        assert "annotations" not in obj["metadata"], obj["metadata"]
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"labels": {}}}, MERGE, fieldManager="merger"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", {**applied(name), "metadata": {
        "name": name, "namespace": NS, "labels": {}}}, APPLY, fieldManager="applier"))


def test_a_field_manager_kube_would_refuse_is_refused_alike(clients: dict[str, Client]) -> None:
    both(clients, lambda c: c.send("POST", "", manifest("badmanager"), fieldManager="m" * 129))
    both(clients, lambda c: c.send("PATCH", "/badmanager", {}, MERGE, fieldManager="a%07b"))


def test_more_than_ten_updaters_fold_into_ancient_changes_alike(clients: dict[str, Client]) -> None:
    name = "cap"
    both(clients, lambda c: c.send("POST", "", manifest(name), fieldManager="creator"))
    for i in range(12):
        time.sleep(1.05)  # the oldest entries are chosen by their time in seconds: one write a second
        out = both(clients, lambda c, i=i: c.send("PATCH", f"/{name}", {"metadata": {"labels": {f"l{i:02}": "x"}}},
                                                  MERGE, fieldManager=f"u{i:02}"))
    managers = [e["manager"] for e in out["ours"][1]["metadata"]["managedFields"]]
    assert "ancient-changes" in managers and len(managers) == 10


MERGE_EXTENSIONS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type")


def merge_structure(doc: Obj, kind: str) -> dict[str, Obj]:
    """Every merge extension of a kind's schema in an OpenAPI v2 or v3 document, by property path,
    following ``$ref`` (also kube's ``allOf: [{$ref}]`` wrapping) into the document's components."""
    schemas = doc["components"]["schemas"] if "components" in doc else doc["definitions"]
    out: dict[str, Obj] = {}

    def walk(node: Obj, path: str, seen: frozenset[str]) -> None:
        refs = [node.get("$ref")] + [n.get("$ref") for n in node.get("allOf", [])]
        for ref in filter(None, refs):
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                walk(schemas[name], path, seen | {name})
        found = {k: node[k] for k in MERGE_EXTENSIONS if k in node}
        if found:
            out.setdefault(path, {}).update(found)
        for key, prop in node.get("properties", {}).items():
            walk(prop, f"{path}.{key}", seen)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]", seen)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}", seen)

    walk(schemas[kind], "", frozenset({kind}))
    return out


def test_openapi_v3_publishes_the_merge_structure_kube_publishes_for_the_crd(clients: dict[str, Client]) -> None:
    """Argo CD's server-side diff merges with the structure it reads from /openapi/v3: list types
    (with map keys) and map types must be what kube-apiserver publishes for the CRD."""
    kind = "io.kosmos.v1alpha1.VirtualCluster"
    docs = {name: c.get_raw("/openapi/v3/apis/kosmos.io/v1alpha1") for name, c in clients.items()}
    kube, ours = merge_structure(docs["baseline"], kind), merge_structure(docs["ours"], kind)
    assert ".status.conditions" in kube and ".metadata.finalizers" in kube, kube
    assert ours == kube, json.dumps({"kube": kube, "ours": ours}, indent=1, sort_keys=True)
    # The PATCH operations accept the same bodies (kubectl picks its patch type from this list).
    item = "/apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}"
    for path in (item, item + "/status"):
        accepted = {name: list(doc["paths"][path]["patch"]["requestBody"]["content"]) for name, doc in docs.items()}
        assert accepted["ours"] == accepted["baseline"], accepted
    v2 = {name: c.get_raw("/openapi/v2") for name, c in clients.items()}
    for path in (item, item + "/status"):
        consumes = {name: doc["paths"][path]["patch"]["consumes"] for name, doc in v2.items()}
        assert consumes["ours"] == consumes["baseline"], consumes
    kube_v2, ours_v2 = merge_structure(v2["baseline"], kind), merge_structure(v2["ours"], kind)
    assert ours_v2 == kube_v2, json.dumps({"kube": kube_v2, "ours": ours_v2}, indent=1, sort_keys=True)


APPLY = "application/apply-patch+yaml"


def applied(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def test_server_side_apply_creates_keeps_conflicts_forces_and_removes(clients: dict[str, Client]) -> None:
    name = "ssa"
    config = applied(name, kubeconfig="a", externalIps=["10.0.0.1"], kubeInKubeConfig={"apiServerReplicas": 1})
    config["metadata"]["labels"] = {"team": "a"}
    created = both(clients, lambda c: c.send("PATCH", f"/{name}", config, APPLY, fieldManager="mgr-a", force="false"))
    assert created["ours"][0] == 201
    rvs = {n: get(c, name)["metadata"]["resourceVersion"] for n, c in clients.items()}
    # The same apply again changes nothing: 200, same resourceVersion.
    again = both(clients, lambda c: c.send("PATCH", f"/{name}", config, APPLY, fieldManager="mgr-a"))
    assert {n: body["metadata"]["resourceVersion"] for n, (_, body) in again.items()} == rvs
    # Another manager takes two of the fields with an update ...
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {"kubeconfig": "b", "kubeInKubeConfig": {
        "apiServerReplicas": 3}}}, MERGE, fieldManager="kubectl-edit"))
    # ... so applying other values conflicts, field by field, and writes nothing.
    changed = applied(name, kubeconfig="c", externalIps=["10.0.0.1"], kubeInKubeConfig={"apiServerReplicas": 5})
    changed["metadata"]["labels"] = {"team": "a"}
    conflict = both(clients, lambda c: c.send("PATCH", f"/{name}", changed, APPLY, fieldManager="mgr-a"))
    assert conflict["ours"][0] == 409
    one = applied(name, kubeconfig="c")
    both(clients, lambda c: c.send("PATCH", f"/{name}", one, APPLY, fieldManager="other", force="false"))
    # force takes them over.
    both(clients, lambda c: c.send("PATCH", f"/{name}", changed, APPLY, fieldManager="mgr-a", force="true"))
    # Fields the manager stops applying, owned by no one else, are removed (externalIps stays
    # applied: it is immutable here, a rule the CRD does not have).
    dropped = applied(name, kubeconfig="c", externalIps=["10.0.0.1"])
    result = both(clients, lambda c: c.send("PATCH", f"/{name}", dropped, APPLY, fieldManager="mgr-a"))
    for _, body in result.values():
        assert "kubeInKubeConfig" not in body["spec"], body
        assert body["metadata"].get("labels") is None, body


def test_server_side_apply_errors_status_and_dry_run(clients: dict[str, Client]) -> None:
    name = "ssa-more"
    # No fieldManager; force on a merge patch; wrong kind; managedFields in the body.
    both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name), APPLY))
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {}}, MERGE, fieldManager="x", force="false"))
    wrong = {**applied(name), "apiVersion": "kosmos.io/v1alpha2"}
    both(clients, lambda c: c.send("PATCH", f"/{name}", wrong, APPLY, fieldManager="x"))
    # /status of a missing object is not created.
    both(clients, lambda c: c.send("PATCH", f"/{name}/status", {**applied(name), "status": {"phase": "Running"}},
                                   APPLY, fieldManager="vc-controller"))
    # A dry-run create answers 201 and stores nothing.
    dry = both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name, kubeconfig="a"), APPLY,
                                         fieldManager="flux", dryRun="All", force="true"))
    assert dry["ours"][0] == 201
    for _, body in dry.values():
        assert not body["metadata"].get("resourceVersion"), body
    for c in clients.values():
        assert c.send("GET", f"/{name}")[0] == 404
    both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name, kubeconfig="a"), APPLY, fieldManager="flux"))
    with_mf = applied(name)
    with_mf["metadata"]["managedFields"] = []
    both(clients, lambda c: c.send("PATCH", f"/{name}", with_mf, APPLY, fieldManager="x"))
    # A YAML body; then YAML that does not parse, and a body that is not an object.
    yaml_body = (f"apiVersion: kosmos.io/v1alpha1\nkind: VirtualCluster\nmetadata:\n  name: {name}\n"
                 f"  labels:\n    created: 2024-01-02\nspec:\n  kubeconfig: a\n").encode()
    both(clients, lambda c: c.send("PATCH", f"/{name}", yaml_body, APPLY, fieldManager="yaml"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", b"[1, 2]", APPLY, fieldManager="yaml"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", b"null", APPLY, fieldManager="yaml"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", b"a: [", APPLY, fieldManager="yaml"))
    twice = (b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster","metadata":{"name":"' + name.encode() +
             b'"},"spec":{"kubeconfig":"a","kubeconfig":"b"}}')
    # Strict refuses a key given twice, but only once the apply has succeeded (a conflict comes first).
    both(clients, lambda c: c.send("PATCH", f"/{name}", twice, APPLY, fieldManager="yaml", fieldValidation="Strict"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", twice, APPLY, fieldManager="yaml", force="true",
                                   fieldValidation="Strict"))
    # A field the schema does not declare: kube answers 500 (kubernetes#122480).
    bogus = applied(name, kubeconfig="a", bogus=1)
    both(clients, lambda c: c.send("PATCH", f"/{name}", bogus, APPLY, fieldManager="flux"))
    # A stale resourceVersion, another namespace, a uid on create.
    stale = applied(name, kubeconfig="a")
    stale["metadata"]["resourceVersion"] = "1"
    both(clients, lambda c: c.send("PATCH", f"/{name}", stale, APPLY, fieldManager="flux"))
    elsewhere = applied(name, kubeconfig="a")
    elsewhere["metadata"]["namespace"] = "other"
    both(clients, lambda c: c.send("PATCH", f"/{name}", elsewhere, APPLY, fieldManager="flux"))
    with_uid = applied("ssa-uid")
    with_uid["metadata"]["uid"] = "6b1b7a4e-0000-4000-8000-000000000002"
    both(clients, lambda c: c.send("PATCH", "/ssa-uid", with_uid, APPLY, fieldManager="flux"))
    # Status through /status: only status is owned, with the subresource.
    body = {**applied(name, kubeconfig="zzz"), "status": {"phase": "Completed", "reason": "done"}}
    body["metadata"]["labels"] = {"x": "yes"}
    result = both(clients, lambda c: c.send("PATCH", f"/{name}/status", body, APPLY, fieldManager="vc-controller"))
    for _, obj in result.values():
        assert obj["spec"]["kubeconfig"] == "a" and obj["status"]["phase"] == "Completed", obj
    # A dry-run apply of an existing object: 200 with the live resourceVersion, nothing stored.
    both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name, kubeconfig="b"), APPLY,
                                   fieldManager="argocd-controller", dryRun="All", force="true"))
    for c in clients.values():
        assert get(c, name)["spec"]["kubeconfig"] == "a"


def test_status_writes_record_metadata_but_not_spec(clients: dict[str, Client]) -> None:
    """kube-apiserver serving the CRD resets only spec for ownership on /status: metadata written
    there is recorded (its strategy still keeps the stored metadata)."""
    name = "status-meta"
    both(clients, lambda c: c.send("POST", "", manifest(name), fieldManager="kubectl-create"))

    def status(c: Client) -> tuple[int, Obj]:
        obj = get(c, name)
        obj["metadata"]["labels"]["x"] = "yes"
        obj["spec"]["kubeconfig"] = "zzz"
        obj["status"] = {"phase": "Preparing"}
        return c.send("PUT", f"/{name}/status", obj, fieldManager="vc-controller")
    result = both(clients, status)
    for _, obj in result.values():
        assert "x" not in obj["metadata"]["labels"], obj
    both(clients, lambda c: c.send("PATCH", f"/{name}/status", {"metadata": {"annotations": {"a": "b"}},
                                                                 "status": {"phase": "Completed"}}, MERGE,
                                   fieldManager="vc-controller"))


def test_resources_mode_is_defaulted_and_its_enum_checked_as_the_crd_does(clients: dict[str, Client]) -> None:
    """``resourcesMode`` defaults to Shared wherever ``promoteResources`` is given (on create, on a patch
    that nulls it, on an apply that leaves it out) and is owned as kube owns a defaulted field; a value
    outside the enum is refused with the same cause."""
    name = "slice"
    created = both(clients, lambda c: c.send("POST", "", {**applied(name), "spec": {"promoteResources": {
        "resources": {"cpu": 10, "memory": "100Gi"}}}}, fieldManager="creator"))
    assert {n: body["spec"] for n, (_, body) in created.items()} == {
        n: {"promoteResources": {"resources": {"cpu": 10, "memory": "100Gi"}, "resourcesMode": "Shared"}}
        for n in clients}
    dedicated = both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {"promoteResources": {
        "resourcesMode": "Dedicated"}}}, MERGE, fieldManager="patcher"))
    assert {n: body["spec"]["promoteResources"]["resourcesMode"] for n, (_, body) in dedicated.items()} == {
        n: "Dedicated" for n in clients}
    nulled = both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {"promoteResources": {
        "resourcesMode": None}}}, MERGE, fieldManager="patcher"))
    assert {n: body["spec"]["promoteResources"]["resourcesMode"] for n, (_, body) in nulled.items()} == {
        n: "Shared" for n in clients}
    config = applied(name, promoteResources={"nodes": ["node1"], "resources": {"cpu": 4}})
    result = both(clients, lambda c: c.send("PATCH", f"/{name}", config, APPLY, fieldManager="applier",
                                            force="true"))
    assert {n: body["spec"]["promoteResources"]["resourcesMode"] for n, (_, body) in result.items()} == {
        n: "Shared" for n in clients}
    # A value of another JSON type gets the enum's cause after the type error, as a CRD gives it.
    for wrong in ("Exclusive", "shared", "Shared ", "", 1, 1.0, 1e20, 2**70, True, {"a": 1}, [1, 2.0, {"a": 1}], []):
        refused = both(clients, lambda c, w=wrong: c.send("PATCH", f"/{name}", {"spec": {"promoteResources": {
            "resourcesMode": w}}}, MERGE, fieldManager="patcher"))
        assert refused["ours"][0] == 422, refused["baseline"]


def test_server_side_apply_of_sets_and_keyed_lists(clients: dict[str, Client]) -> None:
    """Items of sets and keyed lists are owned one by one: two managers share a list, the order
    of the merge is kube's, and an item one manager drops goes while the other's stay."""
    name = "ssa-lists"

    def spec_apply(manager: str, nodes: list[str], infos: list[Obj], **query: str) -> Any:
        body = applied(name, promoteResources={"nodes": nodes, "nodeInfos": infos})
        return lambda c: c.send("PATCH", f"/{name}", body, APPLY, fieldManager=manager, **query)

    both(clients, spec_apply("one", ["a", "b", "c", "d"], [{"nodeName": "a"}, {"nodeName": "b"}]))
    result = both(clients, spec_apply("two", ["a", "aprime", "c", "cprime"], [{"nodeName": "c"}]))
    orders = {n: body["spec"]["promoteResources"] for n, (_, body) in result.items()}
    assert orders["ours"] == orders["baseline"], orders
    result = both(clients, spec_apply("one", ["b"], [{"nodeName": "b"}]))
    orders = {n: body["spec"]["promoteResources"] for n, (_, body) in result.items()}
    assert orders["ours"] == orders["baseline"], orders

    def conditions(manager: str, items: list[Obj], **query: str) -> Any:
        body = {**applied(name), "status": {"conditions": items}}
        return lambda c: c.send("PATCH", f"/{name}/status", body, APPLY, fieldManager=manager, **query)
    both(clients, conditions("a", [{"type": "Ready", "status": "True"}]))
    both(clients, conditions("b", [{"type": "Ready", "status": "False"}, {"type": "Synced", "status": "True"}]))
    both(clients, conditions("b", [{"type": "Ready", "status": "False"}], force="true"))


def test_server_side_apply_after_updates_and_resets(clients: dict[str, Client]) -> None:
    """Co-ownership with an updater, a field shared by two appliers, and an object whose entries
    were reset (its fields then belong to before-first-apply)."""
    name = "ssa-shared"
    both(clients, lambda c: c.send("POST", "", manifest(name), fieldManager="kubectl-create"))
    same = applied(name, externalIps=["10.0.0.2", "10.0.0.1"], promotePolicies=[{"nodeCount": 1}])
    both(clients, lambda c: c.send("PATCH", f"/{name}", same, APPLY, fieldManager="kubectl"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name, kubeconfig="k"), APPLY, fieldManager="one"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name, kubeconfig="k"), APPLY, fieldManager="two"))
    result = both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name), APPLY, fieldManager="one"))
    assert all(body["spec"]["kubeconfig"] == "k" for _, body in result.values())
    result = both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name), APPLY, fieldManager="two"))
    assert all("kubeconfig" not in body["spec"] for _, body in result.values())
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"metadata": {"managedFields": [{}]}}, MERGE,
                                   fieldManager="resetter"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {"kubeconfig": "z"}}, MERGE, fieldManager="p"))
    both(clients, lambda c: c.send("PATCH", f"/{name}", applied(name, kubeconfig="y"), APPLY, fieldManager="one"))


def test_kubectl_apply_server_side_after_client_side_apply(clients: dict[str, Client]) -> None:
    """kubectl's own conflicts with what its client-side apply wrote are forgiven (for the manager
    kubectl only), and its last-applied annotation is rewritten to the applied configuration."""
    for manager, name in (("kubectl", "csa-kubectl"), ("argocd-controller", "csa-argo")):
        manifest_ = applied(name, kubeconfig="a")
        created = {**manifest_, "metadata": {**manifest_["metadata"], "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(manifest_) + "\n"}}}
        both(clients, lambda c, body=created: c.send("POST", "", body, fieldManager="kubectl-client-side-apply"))
        changed = applied(name, kubeconfig="b")
        result = both(clients, lambda c, body=changed, name=name, manager=manager: c.send(
            "PATCH", f"/{name}", body, APPLY, fieldManager=manager, force="false"))
        assert result["ours"][0] == (200 if manager == "kubectl" else 409), result["ours"]
        if manager == "kubectl":
            notes = {n: body["metadata"]["annotations"] for n, (_, body) in result.items()}
            assert notes["ours"] == notes["baseline"], notes


def test_hibernation_is_defaulted_and_its_duration_checked_as_the_crd_does(clients: dict[str, Client]) -> None:
    """``wakeOnAccess`` defaults to true wherever ``hibernation`` is given, on create, on a patch that
    nulls it and on an apply that leaves it out, and the defaulted field is owned as kube owns it."""
    name = "sleepy"
    created = both(clients, lambda c: c.send("POST", "", {**applied(name), "spec": {"hibernation": {}}},
                                             fieldManager="creator"))
    assert {n: body["spec"] for n, (_, body) in created.items()} == {
        n: {"hibernation": {"wakeOnAccess": True}} for n in clients}
    patched = both(clients, lambda c: c.send("PATCH", f"/{name}", {"spec": {"hibernation": {
        "hibernated": True, "wakeOnAccess": None}}}, MERGE, fieldManager="patcher"))
    assert {n: body["spec"] for n, (_, body) in patched.items()} == {
        n: {"hibernation": {"hibernated": True, "wakeOnAccess": True}} for n in clients}
    config = applied(name, hibernation={"afterInactivity": "1h30m"})
    result = both(clients, lambda c: c.send("PATCH", f"/{name}", config, APPLY, fieldManager="applier"))
    assert {n: body["spec"]["hibernation"] for n, (_, body) in result.items()} == {
        n: {"hibernated": True, "afterInactivity": "1h30m", "wakeOnAccess": True} for n in clients}
    # A string that is no duration, or a value of the wrong type, is refused with the same causes. (We
    # are stricter where the CRD's go-openapi format is loose: "1d", "0s", "-1h" and, oddly, ["1h"] pass
    # it, while the reconciler needs a positive Go duration.)
    for wrong in ({"afterInactivity": "soon"}, {"hibernated": "yes"}, {"afterInactivity": 30},
                  {"afterInactivity": 1.5}, {"afterInactivity": True}, {"afterInactivity": {"a": 1}}):
        refused = both(clients, lambda c, w=wrong: c.send("PATCH", f"/{name}", {"spec": {"hibernation": w}}, MERGE,
                                                          fieldManager="patcher"))
        assert refused["ours"][0] == 422, refused["baseline"]
