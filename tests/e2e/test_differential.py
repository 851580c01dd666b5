"""One script of raw requests, run step by step against kube-apiserver serving VirtualClusters as the
CRD generated from our schema, against vc-apiserver directly, and against vc-apiserver through a host
kube-apiserver's aggregator: every verb, every patch type, and the error paths (bad bodies, wrong
kinds and apiVersions, content types, paths, subresources, selectors, resourceVersions, sizes,
query values, preconditions).

For each step the answers must agree on what a client reads: the code, the Status (reason, message,
details and causes), the object's key fields (kind, apiVersion, name, namespace, generation, labels,
finalizers, spec, status, managedFields without times, which system fields are set), list items,
watch events and Warning headers. Times, uids and resourceVersion values are normalised. Ours through
the aggregator must answer exactly as ours directly.

What differs on purpose is listed once, in :data:`INTENDED`, each with its reason
(``docs/differences.md`` says the same for readers and is checked against it). Every entry there must
still show in a run: a difference that went away is taken off the list.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.apis.resource import FINALIZER
from tests.support.differential import BASELINE, OURS, VIA_AGGREGATOR, Client, DifferentialLab, Response

Obj = dict[str, Any]
GV = "kosmos.io/v1alpha1"
ALL = "/apis/kosmos.io/v1alpha1/virtualclusters"
JSON, YAML = "application/json", "application/yaml"
MERGE, JSON_PATCH, APPLY = "application/merge-patch+json", "application/json-patch+json", "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's --max-request-body-bytes default
NAMESPACES = {BASELINE: "diff", OURS: "diff", VIA_AGGREGATOR: "dvia"}  # ours and via share one etcd; same length
DUMP = os.environ.get("VC_DIFF_DUMP", "")  # a file to write every answer to, for a person comparing them
DOCS = Path(__file__).resolve().parents[2] / "docs" / "differences.md"


# -- the differences kept on purpose -------------------------------------------------------------

@dataclass(frozen=True)
class Intended:
    """A difference kept on purpose: in the answers to ``steps``, the compared ``keys`` ("*": any)
    may differ; or, for what we add everywhere, ``ours`` rewrites our views to take it out.
    ``where``: "ours" (directly and through the aggregator) or "direct" (only directly)."""

    reason: str
    steps: tuple[str, ...] = ()
    keys: tuple[str, ...] = ("*",)
    ours: Callable[[Obj], Obj] | None = None
    where: str = "ours"


def _without_our_finalizer(view: Obj) -> Obj:
    """Our finalizer out of an object's view (and out of every listed item's)."""
    out = dict(view)
    for key, value in view.items():
        if key.endswith("metadata.finalizers") and isinstance(value, list) and FINALIZER in value:
            out[key] = [f for f in value if f != FINALIZER] or None
            keys = key.removesuffix("finalizers") + "keys"
            if out[key] is None and isinstance(out.get(keys), list):
                out[keys] = [k for k in out[keys] if k != "finalizers"]
    return out


INTENDED: dict[str, Intended] = {
    "our-finalizer": Intended(
        "vc-apiserver adds the kosmos.io/virtualcluster finalizer on create: deleting a VirtualCluster "
        "tears down its control plane and returns its nodes first; a CRD has no controller of its own.",
        ours=_without_our_finalizer),
    "delete-held-by-our-finalizer": Intended(
        "With only our finalizer on it, a DELETE marks the object (200, the object with its "
        "deletionTimestamp) where the CRD removes it at once (200, a Success Status).",
        steps=("delete an object only our finalizer holds",)),
    "names-are-dns-labels": Intended(
        "A VirtualCluster's name is used in the names of host objects, so it must be a DNS-1123 label "
        "(API.md); a CRD accepts any DNS-1123 subdomain.",
        steps=("create with a dotted name", "delete the dotted name", "create with an invalid name",
               "create with a name too long")),
    "immutable-external-ips": Intended(
        "spec.externalIP and spec.externalIps are in the tenant's serving certificate, so they are "
        "immutable after create; the generated CRD states no such rule.",
        steps=("replace ips changing spec.externalIps",)),
    "standalone-has-no-namespaces": Intended(
        "Standalone (no host) there are no namespaces to check: a create in any namespace succeeds. "
        "Behind a host, a namespace that does not exist there is refused as kube refuses it.",
        steps=("create in a namespace that does not exist",), where="direct"),
    "table-nodes-cell": Intended(
        "The NODES column is computed (ready/desired); a CRD column can only select a field, so the "
        "generated CRD prints the promote policies' node counts.",
        steps=("get b as a Table", "list as a Table"), keys=("table.cells",)),
    "no-5xx-for-client-errors": Intended(
        "kube-apiserver answers these malformed requests 500 (an error without a reason); we answer 400 "
        "BadRequest with the same message: the mistake is the client's (hostile input never gets a 5xx).",
        steps=("create with a resourceVersion", "get a at a malformed resourceVersion",
               "watch at a malformed resourceVersion", "replace a at a malformed resourceVersion"),
        keys=("code", "status.code", "reason")),
    "watch-history-since-our-etcd-began": Intended(
        "Both keep kube's watch-cache rule: a watch from before the revision the cache listed at is 410 "
        "Expired, and one inside the window is served from the cache's history. kube-apiserver's etcd "
        "has taken hundreds of writes before its CRD's cache lists; our dedicated etcd begins with us, "
        "so resourceVersion=1 is inside our window until the history's capacity or a restart moves it.",
        steps=("watch from resourceVersion=1",), keys=("events",)),
    "object-too-large-for-etcd": Intended(
        "An object beyond etcd's request limit is 413 RequestEntityTooLarge here, naming the limit; "
        "kube-apiserver passes on its etcd client's 500 (gRPC ResourceExhausted).",
        steps=("create an object over etcd's limit",)),
}


# -- the script ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One request. ``path``: "" is the namespace's collection, "/a" an object, "/a/status" its
    status; a path starting with "/apis" is used as it is. ``body``: a dict or list is sent as JSON,
    str and bytes as they are, a callable of the run's state gives one of these. ``${a.rv}``,
    ``${a.uid}`` (the last object named ``a`` seen), ``${page.continue}`` (a saved list) and
    ``${ns}`` are replaced in the path, query and body. ``code``: what kube-apiserver answers (a
    check on the script itself)."""

    id: str
    method: str
    path: str = ""
    query: str = ""
    body: Any = None
    content_type: str | None = JSON
    accept: str | None = None
    code: int = 200
    save: str = ""  # keep the answer under this name (``${save.rv}``, ``${save.continue}``)


def vc(name: str | None = None, spec: Obj | None = None, labels: dict[str, str] | None = None,
       **meta: Any) -> Obj:
    metadata: Obj = {**({"name": name} if name else {}), **({"labels": labels} if labels else {}), **meta}
    return {"apiVersion": GV, "kind": "VirtualCluster", "metadata": metadata, "spec": spec or {}}


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


A = vc("a", {"kubeconfig": "k1", "externalIps": ["10.0.0.1"]}, {"app": "x", "tier": "one"},
       finalizers=["example.com/hold"])
B = vc("b", {"promotePolicies": [{"nodeCount": 1, "labelSelector": {"matchLabels": {"zone": "z1"}}}]},
       {"app": "y"})
YAML_BODY = "apiVersion: kosmos.io/v1alpha1\nkind: VirtualCluster\nmetadata:\n  name: from-yaml\n" \
            "  labels:\n    app: z\nspec:\n  kubeconfig: k\n"
TWICE = b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster","metadata":{"name":"%s"},' \
        b'"spec":{"kubeconfig":"a","kubeconfig":"b"}}'
STRIP = {"metadata": {"finalizers": None}}

SCRIPT: list[Step] = [
    # -- create ---------------------------------------------------------------------------
    Step("create a", "POST", body=A, code=201, save="a0"),
    Step("create a again", "POST", body=A, code=409),
    Step("create b", "POST", body=B, code=201),
    Step("create with generateName", "POST", body=vc(None, generateName="gen-"), code=201),
    Step("create ips", "POST", body=vc("ips", {"externalIps": ["10.0.0.1"]}), code=201),
    Step("create held", "POST", body=vc("held"), code=201),
    Step("create with a finalizer without a domain", "POST", body=vc("bare", finalizers=["hold", "a.b"]), code=201),
    Step("create with a name that is a number", "POST", body={**vc(None), "metadata": {"name": 5}}, code=400),
    Step("create with a label value that is a number", "POST", body={**vc(None), "metadata": {"name": "n",
                                                                                             "labels": {"a": 1}}},
         code=400),
    Step("create with finalizers a string", "POST", body={**vc(None), "metadata": {"name": "n", "finalizers": "x"}},
         code=400),
    Step("create without a name", "POST", body=vc(None), code=422),
    Step("create with an invalid name", "POST", body=vc("Bad_Name"), code=422),
    Step("create with a dotted name", "POST", body=vc("dotted.name"), code=201),
    Step("delete the dotted name", "DELETE", "/dotted.name", content_type=None),
    Step("create with a name too long", "POST", body=vc("n" * 254), code=422),
    Step("create with another namespace in the body", "POST", body=vc("c", namespace="elsewhere"), code=400),
    Step("create in a namespace that does not exist", "POST", "/apis/kosmos.io/v1alpha1/namespaces/nowhere/"
         "virtualclusters", body=vc("c"), code=404),
    Step("create with kind Pod", "POST", body={**vc("c"), "kind": "Pod"}, code=422),
    Step("create with apiVersion v1alpha2", "POST", body={**vc("c"), "apiVersion": "kosmos.io/v1alpha2"}, code=400),
    Step("create with apiVersion v1alpha2 (Strict)", "POST", query="fieldValidation=Strict",
         body={**vc("c"), "apiVersion": "kosmos.io/v1alpha2"}, code=400),
    Step("create with apiVersion v1", "POST", body={**vc("c"), "apiVersion": "v1"}, code=400),
    Step("create without kind", "POST", body={"apiVersion": GV, "metadata": {"name": "c"}}, code=400),
    Step("create without apiVersion", "POST", body={"kind": "VirtualCluster", "metadata": {"name": "c"}}, code=400),
    Step("create with malformed JSON", "POST", body=b'{"apiVersion": ', code=400),
    Step("create with a trailing comma", "POST", body=b'{"apiVersion": "kosmos.io/v1alpha1",}', code=400),
    Step("create with a truncated number", "POST", body=b'{"kind": "VirtualCluster", "a": -', code=400),
    Step("create with a bad escape", "POST", body=b'{"kind": "Virtual\\qCluster"}', code=400),
    Step("create with kind a number", "POST", body=b'{"kind": 5}', code=400),
    Step("create with a three-part apiVersion", "POST", body={**vc("c"), "apiVersion": "a/b/c"}, code=400),
    Step("create with a JSON array", "POST", body=b"[]", code=400),
    Step("create with JSON null", "POST", body=b"null", code=400),
    Step("create with an empty body", "POST", body=b"", code=400),
    Step("create with metadata a string", "POST", body={**vc("c"), "metadata": "c"}, code=400),
    Step("create with spec a string", "POST", body={**vc("c"), "spec": "c"}, code=422),
    Step("create with a field of the wrong type", "POST", body=vc("c", {"kubeconfig": 5}), code=422),
    Step("create with a value out of range", "POST", body=vc("c", {"promotePolicies": [{"nodeCount": -1}]}),
         code=422),
    Step("create with a required field missing", "POST", body=vc("c", {"promotePolicies": [{}]}), code=422),
    Step("create with an unknown field (Warn)", "POST", body=vc("warned", {"bogus": 1}), code=201),
    Step("create with an unknown field (Strict)", "POST", query="fieldValidation=Strict",
         body=vc("c", {"bogus": 1}, other=2), code=400),
    Step("create with an unknown field (Ignore)", "POST", query="fieldValidation=Ignore",
         body=vc("ignored", {"bogus": 1}), code=201),
    Step("create with a field twice (Strict)", "POST", query="fieldValidation=Strict", body=TWICE % b"c", code=400),
    Step("create with a field twice (Warn)", "POST", body=TWICE % b"twice", code=201),
    Step("create with fieldValidation=Bogus", "POST", query="fieldValidation=Bogus", body=vc("c"), code=422),
    Step("create dry-run", "POST", query="dryRun=All", body=vc("dry"), code=201),
    Step("get what a dry-run created", "GET", "/dry", code=404),
    Step("create with dryRun=Bogus", "POST", query="dryRun=Bogus", body=vc("c"), code=422),
    Step("create with a resourceVersion", "POST", body=vc("withrv", resourceVersion="1"), code=500),
    Step("create with a uid and times", "POST", body=vc("withuid", uid="6b1b7a4e-0000-4000-8000-00000000000a",
                                                       creationTimestamp="2020-01-01T00:00:00Z", generation=7),
         code=201),
    Step("create with a status", "POST", body={**vc("withstatus"), "status": {"phase": "Completed"}}, code=201),
    Step("create from YAML", "POST", body=YAML_BODY, content_type=YAML, code=201),
    Step("create from YAML sent as JSON", "POST", body=YAML_BODY.replace("from-yaml", "c"), code=400),
    Step("create without Content-Type", "POST", body=vc("untyped"), content_type=None, code=201),
    Step("create with Content-Type parameters", "POST", body=vc("charset"),
         content_type="application/json; charset=utf-8", code=201),
    Step("create as text/plain", "POST", body=vc("plain"), content_type="text/plain", code=415),
        Step("create as form data", "POST", body=b"a=b", content_type="application/x-www-form-urlencoded", code=415),
    Step("create with a body over the limit", "POST",
         body=lambda run: raw(vc("big", {"kubeconfig": "x" * MAX_BODY})), code=413),
    Step("create an object over etcd's limit", "POST",
         body=lambda run: raw(vc("big", {"kubeconfig": "x" * (2 * 1024 * 1024)})), code=500),
    Step("create with Accept text/plain", "POST", body=vc("accept"), accept="text/plain", code=406),
    Step("create to an object's path", "POST", "/a", body=vc("a"), code=409),
    Step("create to another object's path", "POST", "/a", body=vc("named"), code=201),
    Step("create to a status path", "POST", "/a/status", body=vc("a"), code=405),
    Step("create cluster-wide", "POST", ALL, body=vc("c"), code=404),
    Step("create to an unknown subresource", "POST", "/a/bogus", body=vc("a"), code=404),
    # -- get --------------------------------------------------------------------------------
    Step("get a", "GET", "/a"),
    Step("get a missing object", "GET", "/missing", code=404),
    Step("get a's status", "GET", "/a/status"),
    Step("get an unknown subresource", "GET", "/a/bogus", code=404),
    Step("get a missing object's status", "GET", "/missing/status", code=404),
    Step("get a as YAML", "GET", "/a", accept=YAML),
    Step("get a as text/plain", "GET", "/a", accept="text/plain", code=406),
    Step("get a as protobuf", "GET", "/a", accept=PROTOBUF, code=406),
    Step("get a as protobuf or JSON", "GET", "/a", accept=f"{PROTOBUF}, {JSON}"),
    Step("get a as anything", "GET", "/a", accept="*/*"),
    Step("get a as PartialObjectMetadata", "GET", "/a", accept=PARTIAL),
    Step("get a missing object as YAML", "GET", "/missing", accept=YAML, code=404),
    Step("get an unknown subresource as protobuf", "GET", "/a/bogus", accept=PROTOBUF, code=404),
    Step("get a missing object as a Table", "GET", "/missing", accept=TABLE, code=404),
    Step("get a by name cluster-wide", "GET", ALL + "/a", code=404),
    Step("get an unknown resource", "GET", "/apis/kosmos.io/v1alpha1/namespaces/${ns}/widgets", code=404),
    Step("get b as a Table", "GET", "/b", accept=TABLE),
    Step("get a at resourceVersion 0", "GET", "/a", query="resourceVersion=0"),
    Step("get a at a malformed resourceVersion", "GET", "/a", query="resourceVersion=abc", code=500),
    Step("get a with an unknown query parameter", "GET", "/a", query="bogus=1"),
    # -- list -------------------------------------------------------------------------------
    Step("list", "GET"),
    Step("list by label", "GET", query="labelSelector=app%3Dx"),
    Step("list by set-based labels", "GET", query="labelSelector=app+in+(x,y),tier!%3Dtwo"),
    Step("list by label existence", "GET", query="labelSelector=!tier"),
    Step("list by a malformed label selector", "GET", query="labelSelector=app+in+(x", code=400),
    Step("list by an invalid label value", "GET", query="labelSelector=app%3D-bad-", code=400),
    Step("list by an invalid label key", "GET", query="labelSelector=a/b/c%3Dx", code=400),
    Step("list by name", "GET", query="fieldSelector=metadata.name%3Da"),
    Step("list by not-name", "GET", query="fieldSelector=metadata.name!%3Da"),
    Step("list by an unsupported field", "GET", query="fieldSelector=spec.kubeconfig%3Dk1", code=400),
    Step("list by a malformed field selector", "GET", query="fieldSelector=metadata.name", code=400),
    Step("list cluster-wide by namespace", "GET", ALL, query="fieldSelector=metadata.namespace%3D${ns}"),
    Step("list one", "GET", query="limit=1", save="page"),
    Step("list the next one", "GET", query="limit=1&continue=${page.continue}"),
    Step("list with a negative limit", "GET", query="limit=-1"),
    Step("list with limit=abc", "GET", query="limit=abc", code=400),
    Step("list with a limit beyond int64", "GET", query="limit=99999999999999999999", code=400),
    Step("list with timeoutSeconds and limit malformed", "GET", query="limit=x&timeoutSeconds=y", code=400),
    Step("list with limit=abc and a bad selector", "GET", query="limit=abc&labelSelector=a+in+(", code=400),
    Step("list with a malformed continue", "GET", query="continue=abc", code=400),
    Step("list with a continue that is not base64", "GET", query="continue=a!b", code=400),
    Step("list with a continue at revision 0", "GET",
         query="continue=eyJ2IjogIm1ldGEuazhzLmlvL3YxIiwgInJ2IjogMCwgInN0YXJ0IjogIngifQ", code=400),
    Step("list with a continue of another version", "GET",
         query="continue=eyJ2IjogIm1ldGEuazhzLmlvL3YyIiwgInJ2IjogNSwgInN0YXJ0IjogIngifQ", code=400),
    Step("list with a continue whose revision is a string", "GET",
         query="continue=eyJ2IjogIm1ldGEuazhzLmlvL3YxIiwgInJ2IjogIjUiLCAic3RhcnQiOiAieCJ9", code=400),
    Step("list with a continue that climbs out", "GET",
         query="continue=eyJ2IjogIm1ldGEuazhzLmlvL3YxIiwgInJ2IjogNSwgInN0YXJ0IjogIi4uL3gifQ", code=400),
    Step("list with continue and a resourceVersion", "GET", query="continue=${page.continue}&resourceVersion=1",
         code=400),
    Step("list with continue and resourceVersionMatch", "GET",
         query="continue=${page.continue}&resourceVersionMatch=NotOlderThan", code=422),
    Step("list at resourceVersion 0", "GET", query="resourceVersion=0"),
    Step("list at a malformed resourceVersion", "GET", query="resourceVersion=abc", code=400),
    Step("list at a resourceVersion beyond uint64", "GET", query="resourceVersion=18446744073709551616", code=400),
    Step("list at a future resourceVersion", "GET", query="resourceVersion=9223372036854775807", code=504),
    Step("list Exact at a future resourceVersion", "GET",
         query="resourceVersion=9999999999&resourceVersionMatch=Exact", code=504),
    Step("list with resourceVersionMatch alone", "GET", query="resourceVersionMatch=Exact", code=422),
    Step("list with resourceVersionMatch=Bogus", "GET", query="resourceVersionMatch=Bogus&resourceVersion=1",
         code=422),
    Step("list Exact at resourceVersion 0", "GET", query="resourceVersionMatch=Exact&resourceVersion=0", code=422),
    Step("list Exact at a's creation", "GET", query="resourceVersionMatch=Exact&resourceVersion=${a0.rv}"),
    Step("list NotOlderThan a's creation", "GET", query="resourceVersionMatch=NotOlderThan&resourceVersion=${a0.rv}"),
    Step("list with sendInitialEvents", "GET", query="sendInitialEvents=true", code=422),
    Step("list with timeoutSeconds=abc", "GET", query="timeoutSeconds=abc", code=400),
    Step("list with watch=bogus", "GET", query="watch=bogus&timeoutSeconds=1&labelSelector=app%3Dx"),
    Step("list as a Table", "GET", query="labelSelector=app%3Dx", accept=TABLE),
    Step("list as PartialObjectMetadata", "GET", query="labelSelector=app%3Dx",
         accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
    Step("list as YAML", "GET", query="labelSelector=app%3Dx", accept=YAML),
    # -- watch ------------------------------------------------------------------------------
    Step("watch a", "GET", query="watch=1&fieldSelector=metadata.name%3Da&timeoutSeconds=1"),
    Step("watch from a's creation", "GET", query="watch=true&resourceVersion=${a0.rv}&timeoutSeconds=1&labelSelector=app"),
    Step("watch by an unsupported field", "GET", query="watch=1&fieldSelector=spec.x%3Dy", code=400),
    Step("watch with initial events", "GET", query="watch=1&sendInitialEvents=true&allowWatchBookmarks=true&"
         "resourceVersionMatch=NotOlderThan&labelSelector=app%3Dy&timeoutSeconds=1"),
    Step("watch with resourceVersionMatch", "GET", query="watch=1&resourceVersionMatch=Exact&resourceVersion=1",
         code=422),
    Step("watch initial events without bookmarks", "GET",
         query="watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&labelSelector=app%3Dy&timeoutSeconds=1"),
    Step("watch with timeoutSeconds=abc", "GET", query="watch=1&timeoutSeconds=abc", code=400),
    Step("watch at a malformed resourceVersion", "GET", query="watch=1&resourceVersion=abc", code=500),
    Step("watch from resourceVersion=1", "GET", query="watch=1&resourceVersion=1&timeoutSeconds=1&fieldSelector=metadata.name%3Da"),
    Step("watch at a future resourceVersion", "GET", query="watch=1&resourceVersion=9223372036854775807&timeoutSeconds=1"),
    Step("watch a bad label selector", "GET", query="watch=1&labelSelector=app+in+(x", code=400),
    Step("watch through an object's path", "GET", "/a", query="watch=1&timeoutSeconds=1"),
    # -- update -----------------------------------------------------------------------------
    Step("replace a", "PUT", "/a", body={**A, "metadata": {**A["metadata"], "resourceVersion": "${a.rv}",
                                                           "labels": {"app": "x", "tier": "two"}},
                                         "spec": {"kubeconfig": "k2", "externalIps": ["10.0.0.1"]}}),
    Step("watch a leave a label selector", "GET",  # DELETED, as the last state the selector matched
         query="watch=true&resourceVersion=${a0.rv}&labelSelector=tier%3Done&timeoutSeconds=1"),
    Step("replace a without a resourceVersion", "PUT", "/a", body=A, code=422),
    Step("replace a at a stale resourceVersion", "PUT", "/a",
         body={**A, "metadata": {**A["metadata"], "resourceVersion": "${a0.rv}"}}, code=409),
    Step("replace a at a malformed resourceVersion", "PUT", "/a",
         body={**A, "metadata": {**A["metadata"], "resourceVersion": "abc"}}, code=500),
    Step("replace a with another name in the body", "PUT", "/a",
         body={**A, "metadata": {"name": "other", "resourceVersion": "${a.rv}"}}, code=400),
    Step("replace a with another namespace in the body", "PUT", "/a",
         body={**A, "metadata": {"name": "a", "namespace": "other", "resourceVersion": "${a.rv}"}}, code=400),
    Step("replace a with kind Pod", "PUT", "/a", body={**A, "kind": "Pod"}, code=422),
    Step("replace a with a uid that differs", "PUT", "/a",
         body={**A, "metadata": {**A["metadata"], "resourceVersion": "${a.rv}",
                                 "uid": "6b1b7a4e-0000-4000-8000-00000000000b"}}, code=409),
    Step("replace a with an invalid spec", "PUT", "/a",
         body={**A, "metadata": {**A["metadata"], "resourceVersion": "${a.rv}"},
               "spec": {"externalIps": ["10.0.0.1"], "promotePolicies": [{"nodeCount": -1}]}}, code=422),
    Step("replace ips changing spec.externalIps", "PUT", "/ips",
         body={**vc("ips", {"externalIps": ["10.0.0.9"]}, resourceVersion="${ips.rv}")}),
    Step("replace a missing object", "PUT", "/missing", body=vc("missing"), code=404),
    Step("replace a missing object with a resourceVersion", "PUT", "/missing",
         body=vc("missing", resourceVersion="1"), code=404),
    Step("replace a dry-run", "PUT", "/a", query="dryRun=All",
         body=lambda run: {**run.objects["a"], "spec": {"kubeconfig": "dry", "externalIps": ["10.0.0.1"]}}),
    Step("replace a's status", "PUT", "/a/status",
         body=lambda run: {**run.objects["a"], "status": {"phase": "Pending", "reason": "Waiting"}}),
    Step("replace a's status with an invalid phase", "PUT", "/a/status",
         body=lambda run: {**run.objects["a"], "status": {"phase": "Bogus"}}, code=422),
    Step("replace a missing object's status", "PUT", "/missing/status",
         body={**vc("missing"), "status": {"phase": "Pending"}}, code=404),
    Step("replace an unknown subresource", "PUT", "/a/bogus", body=A, code=404),
    Step("replace the collection", "PUT", body=A, code=400),
    Step("replace a as text/plain", "PUT", "/a", body=A, content_type="text/plain", code=415),
    Step("replace a with a malformed body", "PUT", "/a", body=b"{", code=400),
    # -- patch ------------------------------------------------------------------------------
    Step("merge-patch a", "PATCH", "/a", body={"metadata": {"labels": {"patched": "yes"}}}, content_type=MERGE),
    Step("merge-patch a's spec", "PATCH", "/a", body={"spec": {"kubeconfig": "k3"}}, content_type=MERGE),
    Step("json-patch a", "PATCH", "/a", body=[{"op": "add", "path": "/metadata/annotations",
                                              "value": {"note": "n"}}], content_type=JSON_PATCH),
    Step("json-patch with a failing test", "PATCH", "/a",
         body=[{"op": "test", "path": "/spec/kubeconfig", "value": "nope"}], content_type=JSON_PATCH, code=422),
    Step("json-patch removing a missing path", "PATCH", "/a",
         body=[{"op": "remove", "path": "/spec/nothing"}], content_type=JSON_PATCH, code=422),
    Step("json-patch with an unknown op", "PATCH", "/a", body=[{"op": "bogus", "path": "/spec"}],
         content_type=JSON_PATCH, code=422),
    Step("json-patch that is an object", "PATCH", "/a", body={"op": "add"}, content_type=JSON_PATCH, code=400),
    Step("json-patch with malformed JSON", "PATCH", "/a", body=b"[", content_type=JSON_PATCH, code=400),
    Step("merge-patch with malformed JSON", "PATCH", "/a", body=b"{", content_type=MERGE, code=400),
    Step("merge-patch with malformed JSON (Ignore)", "PATCH", "/a", query="fieldValidation=Ignore", body=b"{",
         content_type=MERGE, code=400),
    Step("merge-patch with a field twice", "PATCH", "/a", body=b'{"spec":{"kubeconfig":"k5","kubeconfig":"k3"}}',
         content_type=MERGE),
    Step("merge-patch null", "PATCH", "/a", body=b"null", content_type=MERGE, code=400),
    Step("json-patch with an op of the wrong type", "PATCH", "/a", body=[{"op": 5, "path": "/spec"}],
         content_type=JSON_PATCH, code=400),
    Step("json-patch that is an object (Ignore)", "PATCH", "/a", query="fieldValidation=Ignore", body={"op": "add"},
         content_type=JSON_PATCH, code=400),
    Step("json-patch missing its path", "PATCH", "/a", body=[{"op": "add", "value": 1}], content_type=JSON_PATCH,
         code=422),
    Step("json-patch of a missing object with malformed JSON", "PATCH", "/missing", body=b"[",
         content_type=JSON_PATCH, code=404),
    Step("patch with an upper-case Content-Type", "PATCH", "/a", body={}, content_type="Application/Merge-Patch+JSON",
         code=415),
    Step("merge-patch that is an array", "PATCH", "/a", body=b"[]", content_type=MERGE, code=400),
    Step("merge-patch with an empty body", "PATCH", "/a", body=b"", content_type=MERGE, code=400),
    Step("strategic-merge-patch a", "PATCH", "/a", body={"metadata": {}}, content_type=STRATEGIC, code=415),
    Step("patch a without Content-Type", "PATCH", "/a", body={"metadata": {}}, content_type=None, code=415),
    Step("patch a as JSON", "PATCH", "/a", body={"metadata": {}}, content_type=JSON, code=415),
    Step("merge-patch a missing object", "PATCH", "/missing", body={"spec": {}}, content_type=MERGE, code=404),
    Step("json-patch a missing object", "PATCH", "/missing", body=[], content_type=JSON_PATCH, code=404),
    Step("merge-patch a's status", "PATCH", "/a/status", body={"status": {"phase": "Preparing"}}, content_type=MERGE),
    Step("merge-patch an unknown subresource", "PATCH", "/a/bogus", body={}, content_type=MERGE, code=404),
    Step("merge-patch at a stale resourceVersion", "PATCH", "/a",
         body={"metadata": {"resourceVersion": "${a0.rv}"}, "spec": {"kubeconfig": "k4"}}, content_type=MERGE,
         code=409),
    Step("merge-patch renaming a", "PATCH", "/a", body={"metadata": {"name": "other"}}, content_type=MERGE,
         code=400),
    Step("merge-patch changing a's uid", "PATCH", "/a", body={"metadata": {"uid": "x"}}, content_type=MERGE,
         code=422),
    Step("merge-patch changing the kind", "PATCH", "/a", body={"kind": "Pod"}, content_type=MERGE, code=422),
    Step("merge-patch with an unknown field (Strict)", "PATCH", "/a", query="fieldValidation=Strict",
         body={"spec": {"bogus": 1}}, content_type=MERGE, code=422),
    Step("merge-patch with an unknown field (Warn)", "PATCH", "/a", body={"spec": {"bogus": 1}}, content_type=MERGE),
    Step("merge-patch with an invalid value", "PATCH", "/a", body={"spec": {"promotePolicies": [{"nodeCount": -1}]}},
         content_type=MERGE, code=422),
    Step("merge-patch dry-run", "PATCH", "/a", query="dryRun=All", body={"spec": {"kubeconfig": "dry"}},
         content_type=MERGE),
    Step("get a after a dry-run patch", "GET", "/a"),
    Step("merge-patch with a body over the limit", "PATCH", "/a",
         body=lambda run: raw({"spec": {"kubeconfig": "x" * MAX_BODY}}), content_type=MERGE, code=413),
    Step("merge-patch with force", "PATCH", "/a", query="force=true", body={}, content_type=MERGE, code=422),
    Step("apply c", "PATCH", "/c", query="fieldManager=tester", body=vc("c", {"kubeconfig": "c"}),
         content_type=APPLY, code=201),
    Step("apply c again", "PATCH", "/c", query="fieldManager=tester", body=vc("c", {"kubeconfig": "c"}),
         content_type=APPLY),
    Step("apply c from YAML", "PATCH", "/c", query="fieldManager=tester&force=true",
         body="apiVersion: kosmos.io/v1alpha1\nkind: VirtualCluster\nmetadata:\n  name: c\nspec:\n  kubeconfig: z\n",
         content_type=APPLY),
    Step("apply c from YAML with a YAML 1.1 boolean", "PATCH", "/c", query="fieldManager=tester&force=true",
         body="apiVersion: kosmos.io/v1alpha1\nkind: VirtualCluster\nmetadata:\n  name: c\nspec:\n  kubeconfig: y\n",
         content_type=APPLY, code=500),
    Step("apply without a fieldManager", "PATCH", "/c", body=vc("c"), content_type=APPLY, code=422),
    Step("apply with force=maybe", "PATCH", "/c", query="fieldManager=t&force=maybe", body=vc("c"),
         content_type=APPLY),
    Step("apply c's status", "PATCH", "/c/status", query="fieldManager=ctl",
         body={**vc("c"), "status": {"phase": "Pending"}}, content_type=APPLY),
    Step("apply a config with a string for a number", "PATCH", "/c", query="fieldManager=t",
         body=vc("c", {"promotePolicies": [{"nodeCount": "2"}]}), content_type=APPLY, code=500),
    Step("apply a config with a string for a list", "PATCH", "/c", query="fieldManager=t",
         body=vc("c", {"externalIps": "x"}), content_type=APPLY, code=500),
    Step("apply to a missing object's status", "PATCH", "/missing/status", query="fieldManager=t",
         body={**vc("missing"), "status": {"phase": "Pending"}}, content_type=APPLY, code=404),
    # -- delete -----------------------------------------------------------------------------
    Step("delete a with a uid precondition that fails", "DELETE", "/a",
         body={"preconditions": {"uid": "6b1b7a4e-0000-4000-8000-00000000000c"}}, code=409),
    Step("delete a with a resourceVersion precondition that fails", "DELETE", "/a",
         body={"preconditions": {"resourceVersion": "${a0.rv}"}}, code=409),
    Step("delete a with a malformed body", "DELETE", "/a", body=b"{", code=400),
    Step("delete a with a body of another kind", "DELETE", "/a", body={"kind": "Pod", "apiVersion": "v1"}, code=400),
    Step("delete a with a body of a kind alone", "DELETE", "/a", body={"kind": "Bogus"}, code=400),
    Step("delete a with a whitespace body", "DELETE", "/a", body=b" ", code=400),
    Step("delete a with preconditions of the wrong type", "DELETE", "/a", body={"preconditions": {"uid": 5}}, code=400),
    Step("delete a with a body, the query not read", "DELETE", "/a", query="dryRun=Bogus&gracePeriodSeconds=x",
         body={"preconditions": {"uid": "6b1b7a4e-0000-4000-8000-00000000000d"}}, code=409),
    Step("delete a with a YAML body", "DELETE", "/a", body="preconditions:\n  uid: x\n", content_type=YAML, code=409),
    Step("delete a with a text/plain body", "DELETE", "/a", body="x", content_type="text/plain", code=415),
    Step("delete a with propagationPolicy=Bogus", "DELETE", "/a", query="propagationPolicy=Bogus", code=422),
    Step("delete a with gracePeriodSeconds=abc", "DELETE", "/a", query="gracePeriodSeconds=abc", code=400),
    Step("delete a with dryRun=Bogus", "DELETE", "/a", query="dryRun=Bogus", code=422),
    Step("delete a missing object", "DELETE", "/missing", code=404),
    Step("delete an unknown subresource", "DELETE", "/a/bogus", code=404),
    Step("delete a's status", "DELETE", "/a/status", code=405),
    Step("take b's finalizers away", "PATCH", "/b", body=STRIP, content_type=MERGE),
    Step("delete b dry-run", "DELETE", "/b", query="dryRun=All", content_type=None),
    Step("get b after a dry-run delete", "GET", "/b"),
    Step("delete b with preconditions that hold", "DELETE", "/b",
         body={"preconditions": {"uid": "${b.uid}", "resourceVersion": "${b.rv}"}}),
    Step("get b once it is gone", "GET", "/b", code=404),
    Step("delete an object only our finalizer holds", "DELETE", "/held", content_type=None),
    Step("delete a", "DELETE", "/a", content_type=None),
    Step("delete a again", "DELETE", "/a", content_type=None),
    Step("add a finalizer while a is deleting", "PATCH", "/a", body={"metadata": {"finalizers": ["x.io/new"]}},
         content_type=MERGE, code=422),
    Step("take a's finalizers away", "PATCH", "/a", body=STRIP, content_type=MERGE),
    Step("get a once it is gone", "GET", "/a", code=404),
    Step("create d1", "POST", body=vc("d1", labels={"group": "dc"}), code=201),
    Step("create d2", "POST", body=vc("d2", labels={"group": "dc"}), code=201),
    Step("take d1's finalizers away", "PATCH", "/d1", body=STRIP, content_type=MERGE),
    Step("take d2's finalizers away", "PATCH", "/d2", body=STRIP, content_type=MERGE),
    Step("delete the collection by a malformed selector", "DELETE", query="labelSelector=group+in+(",
         content_type=None, code=400),
    Step("delete the collection dry-run", "DELETE", query="labelSelector=group%3Ddc&dryRun=All", content_type=None),
    Step("delete the collection by label", "DELETE", query="labelSelector=group%3Ddc", content_type=None),
    Step("list what deletecollection left", "GET", query="labelSelector=group%3Ddc"),
    Step("delete the collection cluster-wide", "DELETE", ALL, query="labelSelector=group%3Dnone",
         content_type=None, code=404),
]


# -- running it ---------------------------------------------------------------------------------

@dataclass
class Run:
    """One target's progress through the script: the objects and lists it has seen."""

    client: Client
    namespace: str
    objects: dict[str, Obj] = field(default_factory=dict)  # the last object seen, by name
    saved: dict[str, Obj] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)  # uid -> "${name.uid}"

    def value(self, ref: str) -> str:
        name, _, what = ref.partition(".")
        if name == "ns":
            return self.namespace
        obj = self.saved.get(name) or self.objects[name]
        if what == "continue":
            return str(obj["metadata"]["continue"])
        return str(obj["metadata"]["resourceVersion" if what == "rv" else what])

    def fill(self, value: Any) -> Any:
        if isinstance(value, str):
            return re.sub(r"\$\{([\w.-]+)\}", lambda m: self.value(m.group(1)), value)
        if isinstance(value, bytes):
            return self.fill(value.decode()).encode()
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        return value

    def send(self, step: Step) -> Response:
        path = step.path if step.path.startswith("/apis") else \
            f"/apis/kosmos.io/v1alpha1/namespaces/{self.namespace}/virtualclusters{step.path}"
        query = self.fill(step.query)
        body = step.body(self) if callable(step.body) else step.body
        body = self.fill(body)
        if isinstance(body, (dict, list)):
            body = raw(body)
        elif isinstance(body, str):
            body = body.encode()
        headers = {"User-Agent": "differential/1.0"}
        if step.content_type is not None and (body is not None or step.method in ("POST", "PUT", "PATCH")):
            headers["Content-Type"] = step.content_type
        if step.accept is not None:
            headers["Accept"] = step.accept
        resp = self.client.request(step.method, self.fill(path) + (f"?{query}" if query else ""), body, headers)
        self.remember(step, resp)
        return resp

    def remember(self, step: Step, resp: Response) -> None:
        doc = decode(resp)
        if not isinstance(doc, dict):
            return
        objects = [doc] if doc.get("kind") == "VirtualCluster" else \
            [i for i in doc.get("items") or [] if isinstance(i, dict)]
        for obj in objects:
            meta = obj.get("metadata") or {}
            if meta.get("name") and doc.get("kind") == "VirtualCluster" and meta.get("resourceVersion"):
                self.objects[meta["name"]] = obj
            if meta.get("uid") and meta.get("name"):
                self.uids.setdefault(meta["uid"], f"${{{meta['name']}.uid}}")
        if step.save and resp.code < 300:
            self.saved[step.save] = doc


def decode(resp: Response) -> Any:
    media = (resp.header("Content-Type") or [""])[0].split(";")[0].strip()
    try:
        if media == YAML:
            return yaml.safe_load(resp.body)
        if media == JSON:
            return json.loads(resp.body)
    except (ValueError, yaml.YAMLError):
        return None
    return None


# resourceVersions named in messages: "ResourceVersion in precondition: 12", "(12)", "current: 12", ...
RESOURCE_VERSION = re.compile(r"((?:[Rr]esource ?[Vv]ersion[^0-9\"]{0,40}?|current: |in record \()\(?)\d+")
EMBEDDED_OBJECT = re.compile(r'Invalid value: "\{(?:[^"\\]|\\.)*"')
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def view(run: Run, step: Step, resp: Response) -> Obj:
    """What a client reads from an answer, normalised: a flat dict of compared keys."""
    def text(s: Any) -> Any:
        if not isinstance(s, str):
            return s
        for uid, ref in run.uids.items():
            s = s.replace(uid, ref)
        s = UUID.sub("<uid>", s)
        return s.replace(run.namespace, "${ns}")

    def message(s: Any) -> Any:
        s = text(s)
        if not isinstance(s, str):
            return s
        s = EMBEDDED_OBJECT.sub('Invalid value: "<object>"', s)  # a whole object quoted, times and all
        return RESOURCE_VERSION.sub(lambda m: m.group(1) + "<rv>", s)

    out: Obj = {"code": resp.code,
                "media": (resp.header("Content-Type") or [""])[0].split(";")[0].strip(),
                "warnings": [text(w) for w in resp.header("Warning")] or None}
    doc = decode(resp)
    if "watch=" in step.query and resp.code == 200:
        events = [json.loads(line) for line in resp.body.splitlines() if line.strip()]
        out["events"] = [event_view(e, text) for e in events]
        return out
    if doc is None:  # protobuf, plain text: the bytes themselves
        out["body"] = resp.body.decode("latin-1")
        return out
    if not isinstance(doc, dict):
        out["body"] = doc
        return out
    out["kind"], out["apiVersion"] = doc.get("kind"), doc.get("apiVersion")
    if doc.get("kind") == "Status":
        details = doc.get("details") or {}
        out.update({"status": doc.get("status"), "reason": doc.get("reason"), "message": message(doc.get("message")),
                    "status.code": doc.get("code"), "details.name": text(details.get("name")),
                    "details.group": details.get("group"), "details.kind": details.get("kind"),
                    "details.uid": text(details.get("uid")),
                    "details.retryAfterSeconds": details.get("retryAfterSeconds"),
                    # kube validates ObjectMeta more than once on an update and repeats its causes.
                    "details.causes": sorted({(c.get("reason"), c.get("field"), message(c.get("message")))
                                              for c in details.get("causes") or []}) or None})
        return out
    if doc.get("kind") == "Table":
        out["table.columns"] = [(c["name"], c["type"], c.get("format"), c.get("priority"))
                                for c in doc.get("columnDefinitions") or []]
        ages = [i for i, c in enumerate(doc.get("columnDefinitions") or []) if c["name"] == "Age"]
        out["table.cells"] = [[c for i, c in enumerate(r["cells"]) if i not in ages] for r in doc.get("rows") or []]
        out["table.objects"] = [(r.get("object") or {}).get("kind") for r in doc.get("rows") or []]
        out["metadata.resourceVersion"] = bool((doc.get("metadata") or {}).get("resourceVersion"))
        return out
    if "items" in doc:
        meta = doc.get("metadata") or {}
        out.update({"metadata.resourceVersion": bool(meta.get("resourceVersion")),
                    "metadata.continue": bool(meta.get("continue")),
                    "metadata.remainingItemCount": meta.get("remainingItemCount")})
        items = [object_view(i, text) for i in doc["items"]]
        out["items"] = [i["metadata.name"] for i in items]
        for item in items:  # each item's keys on their own, so a difference names the item and the key
            out.update({f"items[{item['metadata.name']}].{k}": v for k, v in item.items()})
        return out
    out.update(object_view(doc, text))
    return out


def object_view(obj: Obj, text: Callable[[Any], Any]) -> Obj:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if meta.get("generateName") and isinstance(name, str) and name.startswith(meta["generateName"]):
        name = meta["generateName"] + "<random>"
    managed = sorted((e.get("manager"), e.get("operation"), e.get("apiVersion"), e.get("subresource") or "",
                      json.dumps(e.get("fieldsV1"), sort_keys=True), "time" in e)
                     for e in meta.get("managedFields") or [])
    return {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"),
            "metadata.name": name, "metadata.namespace": text(meta.get("namespace")),
            "metadata.generateName": meta.get("generateName"), "metadata.labels": meta.get("labels"),
            "metadata.annotations": meta.get("annotations"), "metadata.finalizers": meta.get("finalizers"),
            "metadata.generation": meta.get("generation"), "metadata.ownerReferences": meta.get("ownerReferences"),
            "metadata.deletionGracePeriodSeconds": meta.get("deletionGracePeriodSeconds"),
            "metadata.keys": sorted(meta), "metadata.managedFields": managed or None,
            "spec": obj.get("spec"), "status": obj.get("status"), "keys": sorted(obj)}


def event_view(event: Obj, text: Callable[[Any], Any]) -> Any:
    obj = event.get("object") or {}
    if event.get("type") == "ERROR":
        return ("ERROR", obj.get("code"), obj.get("reason"), text(obj.get("message")))
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if meta.get("generateName") and isinstance(name, str) and name.startswith(meta["generateName"]):
        name = meta["generateName"] + "<random>"
    return (event.get("type"), obj.get("kind"), name, bool(meta.get("resourceVersion")),
            meta.get("annotations") if event.get("type") == "BOOKMARK" else meta.get("labels"))


# Which comparisons an entry's ``where`` explains: "ours" differs from the CRD both directly and
# through the aggregator (the usual); "direct" only directly (through a host we answer as kube).
EXPLAINS = {(BASELINE, OURS): ("ours", "direct"), (BASELINE, VIA_AGGREGATOR): ("ours",),
            (OURS, VIA_AGGREGATOR): ("direct",)}


def compare(step: Step, views: dict[str, Obj], used: set[str]) -> list[str]:
    """The differences between the targets' views that no :data:`INTENDED` entry explains."""
    views = dict(views)
    for name, entry in INTENDED.items():
        if entry.ours is None:
            continue
        for target in (OURS, VIA_AGGREGATOR):
            if target in views:
                rewritten = entry.ours(views[target])
                if rewritten != views[target]:
                    used.add(name)
                views[target] = rewritten
    problems = []
    for (left, right), wheres in EXPLAINS.items():
        if left not in views or right not in views:
            continue
        if (left, right) == (BASELINE, VIA_AGGREGATOR) and views.get(OURS) == views[right]:
            continue  # said once, as baseline vs ours
        a, b = views[left], views[right]
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        if not keys:
            continue
        explained = [name for name, e in INTENDED.items() if e.ours is None and step.id in e.steps
                     and e.where in wheres and ("*" in e.keys or set(keys) <= set(e.keys))]
        if explained:
            used.update(explained)
            continue
        problems.append(f"[{step.id}] {left} vs {right}:\n" + "\n".join(
            f"    {k}:\n      {left}: {a.get(k)!r}\n      {right}: {b.get(k)!r}" for k in keys))
    return problems


def attempt(run: Run, step: Step) -> Response:
    """The answer, or a connection that ended without one, as a pseudo-answer (code 0) to compare."""
    try:
        return run.send(step)
    except OSError as e:
        return Response(0, [], f"{type(e).__name__}: {e}".encode())


@pytest.fixture(scope="module")
def runs(differential_lab: DifferentialLab) -> dict[str, Run]:
    differential_lab.namespace(NAMESPACES[BASELINE], NAMESPACES[VIA_AGGREGATOR])
    via = differential_lab.aggregated()
    clients = {BASELINE: differential_lab.clients[BASELINE], OURS: differential_lab.clients[OURS],
               VIA_AGGREGATOR: via}
    return {name: Run(client, NAMESPACES[name]) for name, client in clients.items()}


def test_the_script_answers_as_kube_apiserver_serving_the_crd(runs: dict[str, Run]) -> None:
    problems: list[str] = []
    used: set[str] = set()
    with ThreadPoolExecutor(len(runs)) as pool:
        for step in SCRIPT:
            answers = dict(zip(runs, pool.map(lambda r, s=step: attempt(r, s), runs.values()), strict=True))
            baseline = answers[BASELINE]
            if baseline.code != step.code:
                problems.append(f"[{step.id}] kube-apiserver answered {baseline.code}, the script expects "
                                f"{step.code}: {baseline.body[:500]!r}")
            views = {name: view(runs[name], step, resp) for name, resp in answers.items()}
            if DUMP:
                with open(DUMP, "a") as f:
                    f.write(json.dumps({"step": step.id, **{n: [r.code, r.header("Content-Type"), r.header("Warning"),
                                                               r.body[:1500].decode(errors="replace")]
                                                            for n, r in answers.items()}}) + "\n")
            problems += compare(step, views, used)
    unused = sorted(set(INTENDED) - used)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems)
    assert not unused, f"intended differences that no longer show (take them off INTENDED): {unused}"


def test_the_intended_differences_are_documented() -> None:
    """docs/differences.md names every entry of INTENDED, and no other."""
    documented = set(re.findall(r"^- `([\w-]+)`", DOCS.read_text(), re.MULTILINE))
    assert documented == set(INTENDED), {"undocumented": set(INTENDED) - documented,
                                         "not intended": documented - set(INTENDED)}
