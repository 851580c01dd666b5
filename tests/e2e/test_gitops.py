"""Flux and Argo CD against VirtualClusters, request for request (``tests/support/gitops.py``):
their dry runs, forced applies, managedFields cleanups and server-side diffs, as they run against
vc-apiserver directly and through a host's aggregator; and each sequence once more against
kube-apiserver serving the CRD and vc-apiserver side by side, which must leave the same entries,
labels, annotations and spec after every step."""

from __future__ import annotations

import copy
import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.servers import Lab
from tests.support.gitops import (
    ARGOCD,
    FLUX,
    LAST_APPLIED,
    Api,
    ArgoCD,
    KustomizeController,
    entries,
    fields_to_paths,
    schema_misses,
    sort_key,
)

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
KIND = "io.kosmos.v1alpha1.VirtualCluster"
Transcript = list[Any]


@pytest.fixture(scope="module", params=["direct", "via-host"])
def api(request: pytest.FixtureRequest) -> Api:
    """vc-apiserver directly, and through a host kube-apiserver's aggregator."""
    if request.param == "direct":
        server = request.getfixturevalue("server")
        return Api("direct", server.url, server.ssl("admin"), server.kubeconfig, kube_front=False)
    stack = request.getfixturevalue("host_stack")
    pki = stack.host.pki
    ctx = ssl.create_default_context(cafile=str(pki.path("ca.crt")))
    ctx.load_cert_chain(str(pki.path("admin.crt")), str(pki.path("admin.key")))
    return Api("via-host", stack.host.url, ctx, stack.kubeconfig, kube_front=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Api]]:
    """kube-apiserver serving the CRD (``baseline``) and vc-apiserver (``ours``), neither with a controller."""
    lab = Lab(Path(tmp_path_factory.mktemp("gitops-lab")), [])
    try:
        yield {t.name: Api(t.name, t.url, t.ssl_context(), t.kubeconfig, kube_front=t.name == "baseline")
               for t in lab.start()}
    finally:
        lab.stop()


def manifest(name: str, namespace: str, labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, **({"labels": labels} if labels else {})}
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta, "spec": spec}


OUR_FINALIZER = 'v:"kosmos.io/virtualcluster"'


def seen(obj: Obj) -> Obj:
    """What two servers must agree on after a step: the entries (times aside), labels, annotations,
    spec. The finalizer vc-apiserver adds to every VirtualCluster (the CRD has none) is left out of
    the entries: ``before-first-apply`` owns it with everything else."""
    obj = copy.deepcopy(obj)
    for entry in obj["metadata"].get("managedFields", []):
        meta = entry["fieldsV1"].get("f:metadata", {})
        finalizers = meta.get("f:finalizers", {})
        finalizers.pop(OUR_FINALIZER, None)
        if "f:finalizers" in meta and set(finalizers) <= {"."}:
            del meta["f:finalizers"]
        if "f:metadata" in entry["fieldsV1"] and not meta:
            del entry["fieldsV1"]["f:metadata"]
    meta = obj["metadata"]
    return {"entries": entries(obj), "labels": meta.get("labels"), "annotations": meta.get("annotations"),
            "spec": obj.get("spec")}


def owners(obj: Obj) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """The main resource's entries by (manager, operation), as path sets (a status writer, such as
    vc-apiserver's own reconciler, records its entries on the status subresource)."""
    return {(e["manager"], e["operation"]): fields_to_paths(e["fieldsV1"])
            for e in obj["metadata"].get("managedFields", []) if not e.get("subresource")}


def label(key: str) -> tuple[str, ...]:
    return ("f:metadata", "f:labels", "f:" + key)


# -- the sequences: each asserts what the controller relies on and returns what it saw ----------

def flux_takes_over_from_kubectl(api: Api, ns: str) -> Transcript:
    """Created with client-side ``kubectl apply``, labelled with ``kubectl label``, annotated by an
    operator; then Flux reconciles its own version of it."""
    name = "flux-takeover"
    first = manifest(name, ns, {"team": "a"}, kubeconfig="a", externalIps=["10.0.0.1"])
    api.kubectl("apply", "-f", "-", input=json.dumps(first))
    api.kubectl("label", "vc", name, "-n", ns, "hotfix=yes")
    code, _ = api.patch(ns, name, {"metadata": {"annotations": {"platform/owner": "ops"}}},
                        fieldManager="platform-operator")
    assert code == 200
    before = api.get(ns, name)
    assert LAST_APPLIED in before["metadata"]["annotations"]

    flux = KustomizeController(api)
    desired = manifest(name, ns, {"team": "a"}, kubeconfig="b", externalIps=["10.0.0.1"])
    run = flux.reconcile(desired)
    # The dry run answers the object as the apply would leave it, with Flux's entry in it.
    assert run.dry_run[0] == 200 and run.dry_run[1]["spec"]["kubeconfig"] == "b"
    assert (FLUX, "Apply") in owners(run.dry_run[1])
    # The cleanup removes kubectl's annotation and folds kubectl's Update entries into Flux's Apply
    # entry, sent last; the server answers the entries in kube's order, Apply first.
    assert run.cleanup is not None and run.cleaned is not None
    assert run.cleanup[0] == {"op": "remove",
                              "path": "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"}
    sent = run.cleanup[-1]["value"]
    assert (sent[-1]["manager"], sent[-1]["operation"]) == (FLUX, "Apply")
    folded = owners(before)[("kubectl-client-side-apply", "Update")] | owners(before)[("kubectl-label", "Update")]
    cleaned = run.cleaned[1]
    assert owners(cleaned)[(FLUX, "Apply")] == folded - {("f:metadata", "f:annotations", "f:" + LAST_APPLIED)}
    assert set(owners(cleaned)) == {(FLUX, "Apply"), ("platform-operator", "Update")}
    listed = cleaned["metadata"]["managedFields"]
    assert listed == sorted(listed, key=sort_key) and listed[0]["manager"] == FLUX
    assert LAST_APPLIED not in cleaned["metadata"]["annotations"]
    # Then the apply: Flux's spec, and what only kubectl had set (the hotfix label) is gone; the
    # operator's annotation stays.
    assert run.action == "configured" and run.applied is not None
    applied = run.applied[1]
    assert applied["spec"]["kubeconfig"] == "b" and applied["metadata"]["labels"] == {"team": "a"}
    assert applied["metadata"]["annotations"] == {"platform/owner": "ops"}
    assert set(owners(applied)) == {(FLUX, "Apply"), ("platform-operator", "Update")}
    # The next reconcile finds nothing to do and writes nothing.
    again = flux.reconcile(desired)
    assert again.action == "unchanged" and again.cleanup is None and again.applied is None
    return [run.action, run.dry_run[0], seen(run.dry_run[1]), run.cleanup[:-1], seen(cleaned), seen(applied),
            again.action]


def flux_dry_run_and_drift(api: Api, ns: str) -> Transcript:
    """Flux creates an object, keeps it, reverts an out-of-band edit of its fields, and leaves alone
    what another controller adds beside them."""
    name = "flux-drift"
    desired = manifest(name, ns, {"app": "web"}, kubeconfig="a", externalIps=["10.0.0.1"])
    # The dry run of a missing object: 201 without a resourceVersion ("created"), nothing stored.
    code, dry = api.apply(desired, FLUX, dryRun="All", force="true")
    assert code == 201 and not dry["metadata"].get("resourceVersion"), dry
    assert api.send("GET", api.item(ns, name))[0] == 404
    flux = KustomizeController(api)
    created = flux.reconcile(desired)
    assert created.action == "created" and created.applied is not None and created.applied[0] == 201
    assert set(owners(created.applied[1])) == {(FLUX, "Apply")}
    assert flux.reconcile(desired).action == "unchanged"

    api.kubectl("patch", "vc", name, "-n", ns, "--type", "merge", "-p", '{"spec":{"kubeconfig":"edited"}}')
    edited = api.get(ns, name)
    drift = flux.reconcile(desired)
    assert drift.dry_run[1]["spec"]["kubeconfig"] == "a"
    assert drift.cleanup is not None  # kubectl-patch's entry is folded into Flux's
    assert drift.action == "configured" and drift.applied is not None
    reverted = drift.applied[1]
    assert reverted["spec"]["kubeconfig"] == "a" and set(owners(reverted)) == {(FLUX, "Apply")}

    code, beside = api.patch(ns, name, {"metadata": {"labels": {"owner": "platform"}}},
                             fieldManager="platform-operator")
    assert code == 200
    beside_run = flux.reconcile(desired)
    assert beside_run.action == "unchanged" and beside_run.cleanup is None
    assert api.get(ns, name)["metadata"]["labels"] == {"app": "web", "owner": "platform"}
    return [created.action, seen(created.applied[1]), seen(edited), drift.action, drift.cleanup[:-1], seen(reverted),
            seen(beside), beside_run.action]


def flux_folds_before_first_apply(api: Api, ns: str) -> Transcript:
    """An object whose entries were reset before Flux's first apply: kube gives its fields to
    ``before-first-apply``, which Flux's next cleanup folds into its own entry."""
    name = "flux-bfa"
    legacy = manifest(name, ns, {"team": "a", "legacy": "yes"}, kubeconfig="a")
    code, _ = api.create(legacy, fieldManager="legacy-tool")
    assert code == 201
    code, reset = api.patch(ns, name, {"metadata": {"managedFields": [{}]}}, fieldManager="resetter")
    assert code == 200 and not owners(reset), reset["metadata"]

    flux = KustomizeController(api)
    desired = manifest(name, ns, {"team": "a"}, kubeconfig="b")
    first = flux.reconcile(desired)
    assert set(owners(first.dry_run[1])) == {("before-first-apply", "Update"), (FLUX, "Apply")}
    assert first.cleanup is None and first.action == "configured" and first.applied is not None
    assert first.applied[1]["metadata"]["labels"] == {"team": "a", "legacy": "yes"}  # still before-first-apply's
    assert label("legacy") in owners(first.applied[1])[("before-first-apply", "Update")]

    second = flux.reconcile(desired)
    assert second.cleanup is not None and second.cleaned is not None and second.applied is not None
    assert set(owners(second.cleaned[1])) == {(FLUX, "Apply")}
    assert second.applied[1]["metadata"]["labels"] == {"team": "a"}
    return [first.action, seen(first.dry_run[1]), seen(first.applied[1]), second.action, seen(second.cleaned[1]),
            seen(second.applied[1])]


def argo_cd_diff_and_sync(api: Api, ns: str) -> Transcript:
    """Argo CD creates an application's object, diffs it server-side against edits by others, and
    syncs it back."""
    name = "argo-app"
    desired = manifest(name, ns, {"app.kubernetes.io/instance": "guestbook"}, kubeconfig="a",
                       externalIps=["10.0.0.1"], kubeInKubeConfig={"apiServerReplicas": 1})
    argo = ArgoCD(api)
    code, created = argo.sync(desired)
    assert code == 201 and set(owners(created)) == {(ARGOCD, "Apply")}

    live = api.get(ns, name)
    clean = argo.diff(desired, live)
    mine = [e for e in clean.dry_run["metadata"]["managedFields"] if e["manager"] == ARGOCD]
    assert [e["operation"] for e in mine] == ["Apply"]
    assert schema_misses(mine[0]["fieldsV1"], api.openapi(), KIND) == []
    assert not clean.modified, clean.changed

    api.kubectl("patch", "vc", name, "-n", ns, "--type", "merge", "-p", '{"spec":{"kubeconfig":"edited"}}')
    code, _ = api.patch(ns, name, {"metadata": {"labels": {"owner": "platform"}}}, fieldManager="platform-operator")
    assert code == 200
    edited = api.get(ns, name)
    drift = argo.diff(desired, edited)
    assert drift.changed == {".spec.kubeconfig"}, drift.changed
    assert drift.predicted["spec"]["kubeconfig"] == "a" and drift.predicted["metadata"]["labels"]["owner"] == "platform"

    code, synced = argo.sync(desired)
    assert code == 200 and synced["spec"]["kubeconfig"] == "a"
    assert synced["metadata"]["labels"] == {"app.kubernetes.io/instance": "guestbook", "owner": "platform"}
    assert set(owners(synced)) == {(ARGOCD, "Apply"), ("platform-operator", "Update")}
    assert not argo.diff(desired, api.get(ns, name)).modified
    return [seen(created), seen(clean.dry_run), seen(edited), sorted(drift.changed), seen(synced)]


def argo_cd_over_client_side_apply(api: Api, ns: str) -> Transcript:
    """An object created with client-side ``kubectl apply``: Argo CD's apply without force
    conflicts with kubectl's entry; its sync forces, and kubectl's migration (which Argo CD runs
    in-process) leaves Argo CD the only owner."""
    name = "argo-csa"
    api.kubectl("apply", "-f", "-", input=json.dumps(manifest(name, ns, {"team": "a"}, kubeconfig="a")))
    desired = manifest(name, ns, {"team": "a"}, kubeconfig="b")
    code, conflict = api.apply(desired, ARGOCD, force="false", fieldValidation="Strict")
    assert code == 409, conflict
    assert conflict["message"] == ('Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using '
                                   'kosmos.io/v1alpha1: .spec.kubeconfig')
    assert conflict["details"]["causes"] == [{
        "reason": "FieldManagerConflict", "field": ".spec.kubeconfig",
        "message": 'conflict with "kubectl-client-side-apply" using kosmos.io/v1alpha1'}]

    argo = ArgoCD(api)
    live = api.get(ns, name)
    drift = argo.diff(desired, live)
    assert drift.changed == {".spec.kubeconfig"}, drift.changed
    assert api.get(ns, name)["spec"]["kubeconfig"] == "a"  # the diff's dry runs stored nothing

    code, synced = argo.sync(desired)
    assert code == 200 and synced["spec"]["kubeconfig"] == "b"
    assert set(owners(synced)) == {(ARGOCD, "Apply")}
    # kubectl's annotation went to Argo CD with the migrated entry, and Argo CD does not apply it.
    assert LAST_APPLIED not in (synced["metadata"].get("annotations") or {})
    assert not argo.diff(desired, api.get(ns, name)).modified
    return [conflict["message"], seen(drift.dry_run), sorted(drift.changed), seen(synced)]


SEQUENCES: dict[str, Callable[[Api, str], Transcript]] = {
    "flux-takes-over-from-kubectl": flux_takes_over_from_kubectl,
    "flux-dry-run-and-drift": flux_dry_run_and_drift,
    "flux-folds-before-first-apply": flux_folds_before_first_apply,
    "argo-cd-diff-and-sync": argo_cd_diff_and_sync,
    "argo-cd-over-client-side-apply": argo_cd_over_client_side_apply,
}


# -- against vc-apiserver, directly and through the host --------------------------------------

@pytest.fixture
def ns(api: Api, namespace: str) -> str:
    return api.ensure_namespace(namespace)


def test_flux_takes_over_an_object_kubectl_applied_client_side(api: Api, ns: str) -> None:
    flux_takes_over_from_kubectl(api, ns)


def test_flux_dry_run_stores_nothing_and_an_edit_of_its_fields_is_drift_it_reverts(api: Api, ns: str) -> None:
    flux_dry_run_and_drift(api, ns)


def test_flux_folds_before_first_apply_into_its_entry_and_prunes_what_only_that_owned(api: Api, ns: str) -> None:
    flux_folds_before_first_apply(api, ns)


def test_argo_cd_server_side_diff_reads_its_entry_with_our_schema_and_sees_edits_of_its_fields(
        api: Api, ns: str) -> None:
    argo_cd_diff_and_sync(api, ns)


def test_argo_cd_conflicts_with_client_side_apply_unless_forced_and_migrates_it_on_sync(api: Api, ns: str) -> None:
    argo_cd_over_client_side_apply(api, ns)


# -- side by side with kube-apiserver serving the CRD ----------------------------------------------

@pytest.mark.parametrize("sequence", SEQUENCES)
def test_each_sequence_sees_on_vc_apiserver_what_it_sees_on_kube_apiserver(lab: dict[str, Api],
                                                                           sequence: str) -> None:
    runs = {name: SEQUENCES[sequence](api, api.ensure_namespace(sequence)) for name, api in lab.items()}
    kube, ours = runs["baseline"], runs["ours"]
    assert len(ours) == len(kube)
    for step, (expected, got) in enumerate(zip(kube, ours, strict=True)):
        assert got == expected, f"step {step}:\n{json.dumps({'kube': expected, 'ours': got}, indent=1, default=str)}"
