"""The real kubectl against a running vc-apiserver: every verb as users type it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from hack.harness import binary
from tests.conftest import EXAMPLES, Kubectl, vc

pytestmark = pytest.mark.e2e


def apply(kubectl: Kubectl, manifest: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kubectl.run("apply", "-f", "-", *args, input=json.dumps(manifest), check=check)


def create(kubectl: Kubectl, manifest: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kubectl.run("create", "-f", "-", *args, input=json.dumps(manifest), check=check)


def test_api_resources_lists_virtualclusters_with_short_name_and_verbs(kubectl: Kubectl) -> None:
    out = kubectl.run("api-resources", "--api-group=kosmos.io", "-o", "wide").stdout
    row = next(line for line in out.splitlines() if line.startswith("virtualclusters"))
    assert row.split()[:5] == ["virtualclusters", "vc", "kosmos.io/v1alpha1", "true", "VirtualCluster"]
    assert "create,delete,deletecollection,get,list,patch,update,watch" in row
    assert "kosmos" in row


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_applies_created_then_unchanged_then_configured(kubectl: Kubectl, example: str) -> None:
    path = EXAMPLES / example
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    kubectl.ensure_namespace(yaml.safe_load(path.read_text())["metadata"]["namespace"])
    assert f"{name} created" in kubectl.run("apply", "-f", str(path)).stdout
    assert f"{name} unchanged" in kubectl.run("apply", "-f", str(path)).stdout
    changed = yaml.safe_load(path.read_text())
    changed["metadata"]["labels"] = {"changed": "yes"}
    assert f"{name} configured" in apply(kubectl, changed).stdout
    ns = changed["metadata"]["namespace"]
    assert kubectl.json("get", "vc", name, "-n", ns)["metadata"]["labels"] == {"changed": "yes"}


def test_get_all_namespaces_shows_the_namespace_column(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("a1", namespace))
    out = kubectl.run("get", "vc", "-A").stdout.splitlines()
    assert out[0].split() == ["NAMESPACE", "NAME", "PHASE", "READY", "NODES", "VERSION", "AGE"]
    assert any(line.split()[:2] == [namespace, "a1"] for line in out[1:])


def test_get_wide_adds_the_endpoint_column(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("w1", namespace, {"promotePolicies": [{"nodeCount": 2}]}))
    out = kubectl.run("get", "vc", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "PHASE", "READY", "NODES", "VERSION", "AGE", "ENDPOINT"]
    assert out[1].split()[0] == "w1"
    assert "0/2" in out[1].split()


def test_get_output_formats(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("fmt", namespace, {"externalIP": "10.0.0.1"}, labels={"tier": "gold"}))
    as_yaml = yaml.safe_load(kubectl.run("get", "vc", "fmt", "-n", namespace, "-o", "yaml").stdout)
    assert as_yaml["spec"]["externalIP"] == "10.0.0.1"
    as_json = kubectl.json("get", "vc", "fmt", "-n", namespace)
    assert as_json["metadata"]["labels"] == {"tier": "gold"}
    assert kubectl.run("get", "vc", "fmt", "-n", namespace, "-o",
                       "jsonpath={.spec.externalIP}").stdout == "10.0.0.1"
    cols = kubectl.run("get", "vc", "-n", namespace, "-o",
                       "custom-columns=N:.metadata.name,IP:.spec.externalIP").stdout.split()
    assert cols == ["N", "IP", "fmt", "10.0.0.1"]
    assert kubectl.run("get", "vc", "-n", namespace, "-o", "name").stdout.strip() == \
        "virtualcluster.kosmos.io/fmt"
    shown = kubectl.run("get", "vc", "fmt", "-n", namespace, "--show-labels").stdout.splitlines()
    assert shown[0].split()[-1] == "LABELS" and shown[1].split()[-1] == "tier=gold"


@pytest.mark.parametrize("selector,expected", [
    ("tier=gold", ["g1"]),
    ("tier==gold", ["g1"]),
    ("tier!=gold", ["n1", "s1"]),
    ("tier in (gold,silver)", ["g1", "s1"]),
    ("tier notin (gold)", ["n1", "s1"]),
    ("tier", ["g1", "s1"]),
    ("!tier", ["n1"]),
])
def test_label_selector_operators(kubectl: Kubectl, namespace: str, selector: str, expected: list[str]) -> None:
    create(kubectl, vc("g1", namespace, labels={"tier": "gold"}))
    create(kubectl, vc("s1", namespace, labels={"tier": "silver"}))
    create(kubectl, vc("n1", namespace))
    out = kubectl.run("get", "vc", "-n", namespace, "-l", selector, "-o", "name").stdout.split()
    assert out == [f"virtualcluster.kosmos.io/{n}" for n in expected]


def test_field_selector_on_name_and_unsupported_field(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("f1", namespace))
    create(kubectl, vc("f2", namespace))
    out = kubectl.run("get", "vc", "-n", namespace, "--field-selector", "metadata.name=f2", "-o", "name").stdout
    assert out.split() == ["virtualcluster.kosmos.io/f2"]
    bad = kubectl.run("get", "vc", "-n", namespace, "--field-selector", "spec.externalIP=1", check=False)
    assert bad.returncode != 0
    assert "BadRequest" in bad.stderr and "spec.externalIP" in bad.stderr


def test_chunked_get_returns_every_object(kubectl: Kubectl, namespace: str) -> None:
    docs = "\n---\n".join(json.dumps(vc(f"c{i:02d}", namespace)) for i in range(7))
    kubectl.run("create", "-f", "-", input=docs)
    out = kubectl.run("get", "vc", "-n", namespace, "--chunk-size=2", "-o", "name", "-v=6").stdout.split()
    assert out == [f"virtualcluster.kosmos.io/c{i:02d}" for i in range(7)]


def test_explain_reaches_the_label_selector_of_promote_policies(kubectl: Kubectl) -> None:
    out = kubectl.run("explain", "virtualclusters.spec.promotePolicies.labelSelector").stdout
    assert "KIND:" in out and "VirtualCluster" in out
    assert "matchExpressions" in out and "matchLabels" in out
    top = kubectl.run("explain", "vc").stdout
    assert "spec" in top and "status" in top


def test_resources_mode_is_explained_defaulted_to_shared_and_checked_as_an_enum(kubectl: Kubectl,
                                                                                namespace: str) -> None:
    explained = kubectl.run("explain", "virtualclusters.spec.promoteResources").stdout
    for text in ("resourcesMode\t<string>", "resources\t<map[string]", "Shared (the default)", "Dedicated"):
        assert text in explained, explained
    status = kubectl.run("explain", "virtualclusters.status.sharedResources").stdout
    for text in ("namespace\t<string>", "capacity\t<map[string]", "used\t<map[string]"):
        assert text in status, status
    slice_only = {"promoteResources": {"resources": {"cpu": 10, "memory": "100Gi"}}}
    created = json.loads(kubectl.run("create", "--dry-run=server", "-o", "json", "-f", "-",
                                     input=json.dumps(vc("slice", namespace, slice_only))).stdout)
    assert created["spec"]["promoteResources"] == {"resources": {"cpu": 10, "memory": "100Gi"},
                                                   "resourcesMode": "Shared"}
    refused = create(kubectl, vc("mode", namespace, {"promoteResources": {"resourcesMode": "Exclusive"}}),
                     check=False)
    assert refused.returncode != 0
    assert ('spec.promoteResources.resourcesMode: Unsupported value: "Exclusive": supported values: '
            '"Dedicated", "Shared"') in refused.stderr, refused.stderr


def test_patch_merge_json_and_strategic(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("p1", namespace))
    kubectl.run("patch", "vc", "p1", "-n", namespace, "--type", "merge",
                "-p", '{"spec":{"promotePolicies":[{"nodeCount":1}]}}')
    kubectl.run("patch", "vc", "p1", "-n", namespace, "--type", "json",
                "-p", '[{"op":"replace","path":"/spec/promotePolicies/0/nodeCount","value":3}]')
    got = kubectl.json("get", "vc", "p1", "-n", namespace)
    assert got["spec"]["promotePolicies"] == [{"nodeCount": 3}]
    assert got["metadata"]["generation"] == 3
    failed_test = kubectl.run("patch", "vc", "p1", "-n", namespace, "--type", "json",
                              "-p", '[{"op":"test","path":"/spec/promotePolicies/0/nodeCount","value":9}]',
                              check=False)
    assert failed_test.returncode != 0
    # As for a CRD: kube-apiserver keeps the patch library's reason to itself.
    assert "the server rejected our request due to an error in our request" in failed_test.stderr
    strategic = kubectl.run("patch", "vc", "p1", "-n", namespace, "--type", "strategic",
                            "-p", '{"spec":{}}', check=False)
    assert strategic.returncode != 0
    assert "application/strategic-merge-patch+json is not supported" in strategic.stderr
    assert "accepted media types include: application/json-patch+json, application/merge-patch+json" \
        in strategic.stderr


def test_edit_applies_the_editor_change(kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    create(kubectl, vc("e1", namespace))
    editor = tmp_path / "editor.py"
    editor.write_text(textwrap.dedent("""
        import sys, yaml
        path = sys.argv[1]
        doc = yaml.safe_load(open(path))
        doc["metadata"].setdefault("labels", {})["edited"] = "true"
        yaml.safe_dump(doc, open(path, "w"))
    """))
    env = {**os.environ, "KUBE_EDITOR": f"{sys.executable} {editor}"}
    proc = subprocess.run([binary("kubectl"), "--kubeconfig", str(kubectl.kubeconfig), "edit", "vc", "e1",
                           "-n", namespace], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "edited" in proc.stdout
    assert kubectl.json("get", "vc", "e1", "-n", namespace)["metadata"]["labels"] == {"edited": "true"}


def test_replace_with_a_stale_resource_version_is_a_conflict(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("r1", namespace))
    stale = kubectl.json("get", "vc", "r1", "-n", namespace)
    kubectl.run("label", "vc", "r1", "-n", namespace, "bump=1")
    stale["spec"] = {"externalIps": []}
    out = kubectl.run("replace", "-f", "-", input=json.dumps(stale), check=False)
    assert out.returncode != 0
    assert "the object has been modified; please apply your changes to the latest version" in out.stderr


def test_create_twice_is_already_exists(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("twice", namespace))
    again = create(kubectl, vc("twice", namespace), check=False)
    assert again.returncode != 0
    assert "AlreadyExists" in again.stderr and '"twice" already exists' in again.stderr


def test_validate_modes_for_an_unknown_field(kubectl: Kubectl, namespace: str) -> None:
    manifest = vc("strict", namespace, {"bogus": 1})
    strict = apply(kubectl, manifest, "--validate=strict", check=False)
    assert strict.returncode != 0 and 'unknown field "spec.bogus"' in strict.stderr
    warn = apply(kubectl, manifest, "--validate=warn")
    assert 'unknown field "spec.bogus"' in warn.stderr
    assert "bogus" not in kubectl.json("get", "vc", "strict", "-n", namespace)["spec"]
    manifest["metadata"]["name"] = "lax"
    ignored = apply(kubectl, manifest, "--validate=false")
    assert "bogus" not in ignored.stderr
    assert "bogus" not in kubectl.json("get", "vc", "lax", "-n", namespace)["spec"]


@pytest.mark.parametrize("name,spec,field", [
    ("neg", {"promotePolicies": [{"nodeCount": -1}]}, "spec.promotePolicies[0].nodeCount"),
    ("op", {"promotePolicies": [{"nodeCount": 1, "labelSelector": {"matchExpressions": [
        {"key": "a", "operator": "Near", "values": ["b"]}]}}]},
     "spec.promotePolicies[0].labelSelector.matchExpressions[0].operator"),
    ("Bad_Name", {}, "metadata.name"),
    ("qty", {"promoteResources": {"resources": {"cpu": "ten"}}}, "spec.promoteResources.resources[cpu]"),
])
def test_invalid_objects_name_the_field(kubectl: Kubectl, namespace: str, name: str, spec: dict,
                                        field: str) -> None:
    out = create(kubectl, vc(name, namespace, spec), check=False)
    assert out.returncode != 0
    assert "is invalid" in out.stderr and field in out.stderr
    assert kubectl.run("get", "vc", "-n", namespace, "-o", "name").stdout.strip() == ""


def test_watch_sees_added_modified_deleted(kubectl: Kubectl, namespace: str) -> None:
    watch = subprocess.Popen([binary("kubectl"), "--kubeconfig", str(kubectl.kubeconfig), "get", "vc", "-n",
                              namespace, "-w", "--output-watch-events"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        create(kubectl, vc("watched", namespace))
        kubectl.run("label", "vc", "watched", "-n", namespace, "seen=yes")
        kubectl.run("delete", "vc", "watched", "-n", namespace, "--wait=true", timeout=60)
        time.sleep(1.5)
    finally:
        watch.terminate()
        out, err = watch.communicate(timeout=10)
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("EVENT")]
    assert all(row[1] == "watched" for row in rows), out
    events = [row[0] for row in rows]
    assert events[0] == "ADDED", (out, err)
    assert "MODIFIED" in events
    assert events[-1] == "DELETED"


def test_wait_for_jsonpath_and_for_delete(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("waited", namespace))
    kubectl.run("wait", "vc/waited", "-n", namespace, "--for=jsonpath={.status.phase}=Pending", "--timeout=30s")
    deleter = subprocess.Popen([binary("kubectl"), "--kubeconfig", str(kubectl.kubeconfig), "delete", "vc",
                                "waited", "-n", namespace, "--wait=false"])
    deleter.wait(timeout=30)
    kubectl.run("wait", "vc/waited", "-n", namespace, "--for=delete", "--timeout=30s")
    assert kubectl.run("get", "vc", "-n", namespace, "-o", "name").stdout.strip() == ""


def test_delete_all_removes_every_object(kubectl: Kubectl, namespace: str) -> None:
    for i in range(3):
        create(kubectl, vc(f"d{i}", namespace))
    kubectl.run("delete", "vc", "--all", "-n", namespace, "--wait=true", timeout=60)
    assert kubectl.run("get", "vc", "-n", namespace, "-o", "name").stdout.strip() == ""


def test_server_dry_run_persists_nothing(kubectl: Kubectl, namespace: str) -> None:
    out = create(kubectl, vc("dry", namespace), "--dry-run=server").stdout
    assert "created (server dry run)" in out
    assert kubectl.run("get", "vc", "-n", namespace, "-o", "name").stdout.strip() == ""
    create(kubectl, vc("dry", namespace))
    kubectl.run("delete", "vc", "dry", "-n", namespace, "--dry-run=server")
    assert kubectl.json("get", "vc", "dry", "-n", namespace)["metadata"].get("deletionTimestamp") is None


def test_diff_shows_the_pending_change(kubectl: Kubectl, namespace: str) -> None:
    manifest = vc("diffed", namespace, {"promotePolicies": [{"nodeCount": 1}]})
    apply(kubectl, manifest)
    manifest["spec"]["promotePolicies"][0]["nodeCount"] = 2
    out = kubectl.run("diff", "-f", "-", input=json.dumps(manifest), check=False)
    assert out.returncode == 1, out.stderr  # 1 = differences found
    assert "-  - nodeCount: 1" in out.stdout and "+  - nodeCount: 2" in out.stdout
    apply(kubectl, manifest)
    same = kubectl.run("diff", "-f", "-", input=json.dumps(manifest), check=False)
    assert same.returncode == 0, same.stdout + same.stderr


def test_label_and_annotate(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("la", namespace))
    kubectl.run("label", "vc", "la", "-n", namespace, "env=prod")
    kubectl.run("annotate", "vc", "la", "-n", namespace, "owner=team-a")
    meta = kubectl.json("get", "vc", "la", "-n", namespace)["metadata"]
    assert meta["labels"] == {"env": "prod"}
    assert meta["annotations"]["owner"] == "team-a"
    kubectl.run("label", "vc", "la", "-n", namespace, "env-")
    assert not kubectl.json("get", "vc", "la", "-n", namespace)["metadata"].get("labels")


def test_raw_discovery_and_openapi(kubectl: Kubectl) -> None:
    resources = json.loads(kubectl.run("get", "--raw", "/apis/kosmos.io/v1alpha1").stdout)
    assert resources["kind"] == "APIResourceList"
    assert {r["name"] for r in resources["resources"]} == {
        "virtualclusters", "virtualclusters/status", "virtualclusters/kubeconfig", "virtualclusters/credentials",
        "virtualclustercredentials"}
    v3 = json.loads(kubectl.run("get", "--raw", "/openapi/v3").stdout)
    url = v3["paths"]["apis/kosmos.io/v1alpha1"]["serverRelativeURL"]
    doc = json.loads(kubectl.run("get", "--raw", url).stdout)
    assert "io.kosmos.v1alpha1.VirtualCluster" in doc["components"]["schemas"]
    v2 = json.loads(kubectl.run("get", "--raw", "/openapi/v2").stdout)
    assert "io.kosmos.v1alpha1.VirtualCluster" in v2["definitions"]


def test_kubeconfig_is_conflict_until_a_control_plane_exists(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("kc", namespace))
    out = kubectl.run("get", "--raw", f"/apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/kc/kubeconfig",
                      check=False)
    assert out.returncode != 0 and "is not ready" in out.stderr
    missing = kubectl.run("get", "--raw",
                          f"/apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/nope/kubeconfig",
                          check=False)
    assert "NotFound" in missing.stderr or "not found" in missing.stderr


def test_delete_waits_for_the_finalizer_and_returns(kubectl: Kubectl, namespace: str) -> None:
    create(kubectl, vc("fin", namespace))
    assert kubectl.json("get", "vc", "fin", "-n", namespace)["metadata"]["finalizers"] == ["kosmos.io/virtualcluster"]
    started = time.monotonic()
    kubectl.run("delete", "vc", "fin", "-n", namespace, "--wait=true", timeout=60)
    assert time.monotonic() - started < 30
    gone = kubectl.run("get", "vc", "fin", "-n", namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_apply_server_side_creates_keeps_conflicts_and_forces(kubectl: Kubectl, namespace: str) -> None:
    manifest = vc("ssa1", namespace)
    assert "ssa1 serverside-applied" in apply(kubectl, manifest, "--server-side").stdout
    assert "ssa1 serverside-applied" in apply(kubectl, manifest, "--server-side").stdout
    got = kubectl.json("get", "vc", "ssa1", "-n", namespace, "--show-managed-fields")
    # The reconciler's status writes are its own Update entry; the applier is the one Apply entry.
    assert [e["manager"] for e in got["metadata"]["managedFields"] if e["operation"] == "Apply"] == ["kubectl"]
    other = json.loads(json.dumps(manifest))
    other["metadata"]["labels"] = {"team": "b"}
    apply(kubectl, other, "--server-side", "--field-manager=flux")
    mine = json.loads(json.dumps(manifest))
    mine["metadata"]["labels"] = {"team": "a"}
    conflict = apply(kubectl, mine, "--server-side", check=False)
    assert conflict.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "flux": .metadata.labels.team' in conflict.stderr
    assert "ssa1 serverside-applied" in apply(kubectl, mine, "--server-side", "--force-conflicts").stdout
    assert kubectl.json("get", "vc", "ssa1", "-n", namespace)["metadata"]["labels"] == {"team": "a"}
    same = kubectl.run("diff", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(mine), check=False)
    assert same.returncode == 0, same.stderr
    other_labels = {**mine, "metadata": {**mine["metadata"], "labels": {"team": "d"}}}
    differs = kubectl.run("diff", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(other_labels),
                          check=False)
    assert differs.returncode == 1 and "team: d" in differs.stdout, differs
    dry = apply(kubectl, {**mine, "metadata": {**mine["metadata"], "labels": {"team": "c"}}}, "--server-side",
                "--force-conflicts", "--dry-run=server")
    assert "serverside-applied (server dry run)" in dry.stdout
    assert kubectl.json("get", "vc", "ssa1", "-n", namespace)["metadata"]["labels"] == {"team": "a"}


def test_apply_server_side_after_client_side_apply_leaves_one_owner(kubectl: Kubectl, namespace: str) -> None:
    manifest = vc("ssa2", namespace)
    apply(kubectl, manifest)
    changed = json.loads(json.dumps(manifest))
    changed["metadata"]["labels"] = {"moved": "yes"}
    assert "ssa2 serverside-applied" in apply(kubectl, changed, "--server-side").stdout
    got = kubectl.json("get", "vc", "ssa2", "-n", namespace, "--show-managed-fields")
    managers = {(e["manager"], e["operation"]) for e in got["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers and ("kubectl-client-side-apply", "Update") not in managers, managers
    assert got["metadata"]["labels"] == {"moved": "yes"}
