"""Hostile and broken input: whatever a client sends, the server answers with a Status and keeps serving.

The contract, checked on every answer below: never a 5xx, never a traceback in the server's
log, every error body a well-formed ``Status`` (``kind: Status``, ``apiVersion: v1``,
``status: Failure``, ``code`` equal to the HTTP status, a ``reason`` and a ``message``),
and ``/readyz`` still 200 afterwards. Everything is sent straight to a running server
(the ``server`` fixture, as the playground admin):

- schemathesis drives every operation of our own OpenAPI v3 document with requests that
  are valid and invalid for that document, at random paths and at a real object;
- hypothesis builds objects, JSON merge patches and JSON patches (many aimed at the fields
  only the server writes) and checks what a successful write may and may not change;
- hand-picked hostile inputs pin the answers that matter: deep nesting, bodies near and over
  the 3 MiB limit (413), invalid UTF-8, out-of-range numbers, duplicate keys, null in every
  field, odd selectors, forged continue tokens (400/410, never another namespace's data),
  bad resourceVersion/timeoutSeconds/watch parameters, unknown parameters.

The one 5xx a client can provoke on purpose is kube's own: 504 ``Timeout`` with the cause
``ResourceVersionTooLarge`` for a resourceVersion the server has not reached yet (client-go's
reflector relies on exactly that answer); it is accepted only where the request named such a
resourceVersion. ``VC_SOAK=1`` runs many more (and non-deterministic) examples.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance
from yarl import URL

from tests.conftest import Server, vc

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
MAX_BODY = 3 * 1024 * 1024
INT64 = 2**63
FINALIZER = "kosmos.io/virtualcluster"
SOAK = os.environ.get("VC_SOAK", "") not in ("", "0")

FUZZ = settings(deadline=None, database=None, derandomize=not SOAK, print_blob=True,
                suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


def examples(n: int) -> settings:
    """The example budget of one fuzzer: small in `make test`, 25 times more under VC_SOAK=1."""
    return settings(FUZZ, max_examples=n * 25 if SOAK else n)


TALLY: dict[str, dict[int, int]] = {}  # fuzzer -> HTTP status -> how many times, printed at the end


def tally(fuzzer: str, code: int) -> None:
    counts = TALLY.setdefault(fuzzer, {})
    counts[code] = counts.get(code, 0) + 1


def collection(namespace: str) -> str:
    return f"{GV}/namespaces/{namespace}/virtualclusters"


# -- the contract every answer keeps ----------------------------------------------------------

def assert_status_body(code: int, content_type: str, body: bytes, what: str) -> dict[str, Any]:
    """A well-formed Status: kind, apiVersion v1, status Failure, code == HTTP status, reason, message."""
    assert content_type.split(";")[0].strip() == "application/json", \
        f"{what}: a {code} answered with {content_type!r}: {body[:300]!r}"
    doc = json.loads(body)
    assert isinstance(doc, dict), f"{what}: {body[:300]!r}"
    assert doc.get("kind") == "Status" and doc.get("apiVersion") == "v1", f"{what}: not a Status: {doc}"
    assert doc.get("status") == "Failure", f"{what}: {doc}"
    assert doc.get("code") == code, f"{what}: code {doc.get('code')} in a {code} answer"
    assert isinstance(doc.get("reason"), str) and doc["reason"], f"{what}: no reason: {doc}"
    assert isinstance(doc.get("message"), str) and doc["message"], f"{what}: no message: {doc}"
    details = doc.get("details", {})
    assert isinstance(details, dict), f"{what}: {doc}"
    assert all(isinstance(details.get(k, ""), str) for k in ("name", "group", "kind", "uid")), f"{what}: {doc}"
    for cause in details.get("causes", []):
        assert isinstance(cause, dict) and all(isinstance(v, str) for v in cause.values()), f"{what}: {doc}"
    return doc


def too_large_resource_version(doc: dict[str, Any]) -> bool:
    causes = (doc.get("details") or {}).get("causes") or []
    return doc["code"] == 504 and doc["reason"] == "Timeout" and \
        any(c.get("reason") == "ResourceVersionTooLarge" for c in causes)


def check_answer(code: int, content_type: str, body: bytes, what: str, *,
                 future_rv: bool = False) -> dict[str, Any] | None:
    """Any answer: below 400 anything goes here; an error is a Status, and never a 5xx.

    ``future_rv``: the request named a resourceVersion, so kube's 504 ResourceVersionTooLarge
    is the right answer if the server has not reached it.
    """
    if code < 400:
        return None
    doc = assert_status_body(code, content_type, body, what)
    if code >= 500:
        assert future_rv and too_large_resource_version(doc), f"{what}: server error {code}: {doc}"
    return doc


def check_watch_stream(body: bytes, what: str) -> None:
    """A watch that ended: JSON lines of events; an ERROR event carries a Status that is no 5xx."""
    for line in body.splitlines():
        event = json.loads(line)
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"), f"{what}: {event}"
        if event["type"] == "ERROR":
            status = event["object"]
            assert status.get("kind") == "Status" and status.get("status") == "Failure", f"{what}: {status}"
            assert isinstance(status.get("code"), int) and status["code"] < 500, f"{what}: {status}"


def ints_fit_int64(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -INT64 <= value < INT64
    if isinstance(value, dict):
        return all(ints_fit_int64(v) for v in value.values())
    if isinstance(value, list):
        return all(ints_fit_int64(v) for v in value)
    return True


async def send(http: aiohttp.ClientSession, method: str, path: str | URL, body: bytes | None = None, *,
               content_type: str = "application/json", params: dict[str, str] | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    all_headers = {**({"Content-Type": content_type} if body is not None else {}), **(headers or {})}
    async with http.request(method, path, data=body, params=params, headers=all_headers,
                            timeout=aiohttp.ClientTimeout(total=60)) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


async def call(http: aiohttp.ClientSession, method: str, path: str | URL, body: bytes | None = None, *,
               future_rv: bool = False, **kwargs: Any) -> tuple[int, Any]:
    """Send, check the contract, and return (status, decoded JSON body or None)."""
    code, content_type, raw = await send(http, method, path, body, **kwargs)
    what = f"{method} {path} {kwargs.get('params') or ''} body={body[:200] if isinstance(body, bytes) else body!r}"
    check_answer(code, content_type, raw, what, future_rv=future_rv)
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, None


def raw_path(path: str) -> URL:
    """A path and query sent exactly as written (percent-escapes included, e.g. %FF)."""
    return URL(path, encoded=True)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.fixture
def log_start(server: Server) -> int:
    """Where the server's log stood when the test began: nothing after it may be a traceback."""
    return server.api.log.stat().st_size


def log_mark(server: Server) -> int:
    return server.api.log.stat().st_size


async def assert_survived(http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    """The server is still ready and logged no traceback since ``log_start``."""
    async with http.get("/readyz") as resp:
        assert resp.status == 200, await resp.text()
    text = server.api.log.read_bytes()[log_start:].decode(errors="replace")
    at = text.find("Traceback")
    assert at < 0, f"the server logged a traceback:\n{text[max(0, at - 400):at + 4000]}"


async def ensure(http: aiohttp.ClientSession, namespace: str, name: str, **extra: Any) -> dict[str, Any]:
    """The object, created if missing (and brought back if a fuzzer deleted it)."""
    path = f"{collection(namespace)}/{name}"
    code, obj = await call(http, "GET", path)
    if code == 200 and not obj["metadata"].get("deletionTimestamp"):
        return obj
    if code == 200:  # being deleted: let it go
        await call(http, "PATCH", path, b'{"metadata":{"finalizers":null}}', content_type="application/merge-patch+json")
    code, obj = await call(http, "POST", collection(namespace), dumps({**vc(name, namespace), **extra}))
    assert code == 201, obj
    return await settled(http, namespace, name)


async def settled(http: aiohttp.ClientSession, namespace: str, name: str) -> dict[str, Any]:
    """The object once the reconciler has written its first status (so it races no later write)."""
    deadline = time.monotonic() + 30
    while True:
        code, obj = await call(http, "GET", f"{collection(namespace)}/{name}")
        assert code == 200, obj
        if (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        assert time.monotonic() < deadline, f"the reconciler never observed {namespace}/{name}: {obj}"
        await asyncio.sleep(0.1)


async def remove(http: aiohttp.ClientSession, namespace: str, name: str) -> None:
    """Gone now: finalizers dropped, then deleted."""
    path = f"{collection(namespace)}/{name}"
    await call(http, "PATCH", path, b'{"metadata":{"finalizers":null}}', content_type="application/merge-patch+json")
    code, _ = await call(http, "DELETE", path)
    assert code in (200, 404)


# -- 1. schemathesis, driven by our own OpenAPI document ------------------------------------------

OPERATIONS = [
    "GET /apis/kosmos.io/v1alpha1/",
    "GET /apis/kosmos.io/v1alpha1/virtualclusters",
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters",
    "POST /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters",
    "DELETE /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters",
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}",
    "PUT /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}",
    "PATCH /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}",
    "DELETE /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}",
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}/status",
    "PUT /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}/status",
    "PATCH /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}/status",
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}/kubeconfig",
]
SCHEMATHESIS_NS = "fuzz-openapi"
SCHEMATHESIS_TARGET = "target"


@pytest.fixture(scope="module")
def admin_session(server: Server) -> Iterator[requests.Session]:
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE would replace our CA
    session.verify = str(server.pki.ca)
    session.cert = tuple(str(p) for p in server.pki.cert("admin"))
    yield session
    session.close()


@pytest.fixture(scope="module")
def openapi(server: Server, admin_session: requests.Session) -> Any:
    """Our OpenAPI v3 document, as served, loaded by schemathesis."""
    resp = admin_session.get(server.url + "/openapi/v3/apis/kosmos.io/v1alpha1", timeout=30)
    assert resp.status_code == 200
    return schemathesis.openapi.from_dict(resp.json())


def test_the_openapi_document_describes_every_operation_we_fuzz(openapi: Any) -> None:
    labels = sorted(op.ok().label for op in openapi.get_all_operations())
    assert labels == sorted(OPERATIONS)


def ensure_target_sync(session: requests.Session, server: Server) -> None:
    path = f"{server.url}{collection(SCHEMATHESIS_NS)}/{SCHEMATHESIS_TARGET}"
    current = session.get(path, timeout=30)
    if current.status_code == 200 and not current.json()["metadata"].get("deletionTimestamp"):
        return
    if current.status_code == 200:
        session.patch(path, data=b'{"metadata":{"finalizers":null}}', timeout=30,
                      headers={"Content-Type": "application/merge-patch+json"})
    created = session.post(f"{server.url}{collection(SCHEMATHESIS_NS)}", timeout=30,
                           json=vc(SCHEMATHESIS_TARGET, SCHEMATHESIS_NS, spec={"externalIP": "192.0.2.1"},
                                   labels={"fuzz": "yes"}))
    assert created.status_code in (201, 409), created.text


@pytest.mark.parametrize("label", OPERATIONS)
def test_schemathesis_fuzzes_every_operation_of_our_openapi_document(
        openapi: Any, server: Server, admin_session: requests.Session, label: str) -> None:
    """Valid and invalid requests for each documented operation, at random paths and at a real object."""
    log_start = server.api.log.stat().st_size
    operation = openapi.find_operation_by_label(label)
    pinned = {"namespace": SCHEMATHESIS_NS, "name": SCHEMATHESIS_TARGET}
    pinned = {k: v for k, v in pinned.items() if "{" + k + "}" in operation.path}
    strategies = [operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    if pinned:
        # At the real object, the write options are pinned valid (dryRun=All: the object stays for the next
        # case) and bodies are JSON, so that generated bodies reach validation, admission and storage instead
        # of a 400 for the free-string dryRun or the */* body our document, like kube's, declares.
        fixed = {k: v for k, v in (("dryRun", "All"), ("fieldValidation", "Warn"))
                 if k in {p.name for p in operation.query}}
        media = "application/json" if operation.method.upper() in ("POST", "PUT") else None  # not */*'s pick
        strategies += [operation.as_strategy(mode, path_parameters=pinned, query=fixed or None, media_type=media)
                       for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    seen: dict[int, int] = {}

    @examples(16)
    @given(case=st.one_of(strategies))
    def fuzz(case: Any) -> None:
        if pinned:
            ensure_target_sync(admin_session, server)
        if isinstance(case.body, dict) and case.method in ("POST", "PUT"):
            # Our schema, like kube's, leaves apiVersion and kind free strings: pin them (and the namespace)
            # so that bodies get past the type check and into validation and storage.
            case.body.update({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster"})
            if isinstance(case.body.get("metadata"), dict) and "namespace" in case.path_parameters:
                case.body["metadata"]["namespace"] = case.path_parameters["namespace"]
        query = case.query if isinstance(case.query, dict) else {}
        # A watch is a GET; deletecollection ignores ?watch= as kube-apiserver does and answers a List.
        watch = case.method.upper() == "GET" and str(query.get("watch")) in ("true", "1", "True")
        if watch:
            query["timeoutSeconds"] = "0"  # the watch ends once its initial events are out
        crt, key = server.pki.cert("admin")
        resp = case.call(base_url=server.url, session=admin_session, timeout=60, verify=str(server.pki.ca),
                         cert=(str(crt), str(key)))
        seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
        tally("schemathesis (all operations)", resp.status_code)
        future_rv = re.fullmatch(r"[0-9]+", str(query.get("resourceVersion", ""))) is not None
        content_type = next(iter(v for k, v in resp.headers.items() if k.lower() == "content-type"), [""])
        check_answer(resp.status_code, content_type[0] if isinstance(content_type, list) else content_type,
                     resp.content, case.as_curl_command(), future_rv=future_rv)
        if resp.status_code == 200 and watch:
            check_watch_stream(resp.content, case.as_curl_command())
        elif 200 <= resp.status_code < 300:
            case.validate_response(resp, checks=[response_schema_conformance])

    fuzz()
    print(f"{label}: answers {dict(sorted(seen.items()))}")
    assert sum(seen.values()) > 0
    ready = admin_session.get(server.url + "/readyz", timeout=30)
    assert ready.status_code == 200
    text = server.api.log.read_bytes()[log_start:].decode(errors="replace")
    assert "Traceback" not in text, text[text.find("Traceback") - 400:][:4000]


# -- 2. hypothesis: objects, merge patches, JSON patches ------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def either(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A plausible value for a field, or any JSON at all."""
    return st.one_of(plausible, JSON)


def mostly(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The plausible value nine times in ten, any JSON at all otherwise (so most inputs get past the
    type check and into validation, admission and storage)."""
    return st.integers(0, 9).flatmap(lambda i: JSON if i == 0 else plausible)


DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
NAMES = st.one_of(DNS_LABEL, st.text(max_size=70))
LABEL_KEYS = st.one_of(st.from_regex(r"([a-z0-9.]{1,10}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?",
                                     fullmatch=True), st.text(max_size=70))
LABELS = st.dictionaries(LABEL_KEYS, st.one_of(DNS_LABEL, st.text(max_size=70), JSON), max_size=3)
INTS = st.one_of(st.integers(-3, 10), st.integers(min_value=-(2**70), max_value=2**70),
                 st.sampled_from([2**31, 2**63, 2**64, -(2**63) - 1]))
QUANTITIES = st.one_of(st.sampled_from(["1", "500m", "2Gi", "1e3", "0.5", "-1", "1E", "1Ei", "99999999999999999999Ei",
                                        "", "m", "1.5.5", "1e400", "0x10"]), INTS, st.floats(allow_nan=False,
                                                                                             allow_infinity=False),
                       st.text(max_size=8))
TIMES = st.one_of(st.just("2024-01-02T03:04:05Z"), st.text(max_size=25))
SELECTOR = st.fixed_dictionaries({}, optional={
    "matchLabels": either(LABELS),
    "matchExpressions": either(st.lists(st.fixed_dictionaries({
        "key": either(LABEL_KEYS),
        "operator": either(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt"])),
        "values": either(st.lists(st.text(max_size=10), max_size=3))}), max_size=2))})
SPEC = st.fixed_dictionaries({}, optional={
    "externalIP": either(st.ip_addresses().map(str) | DNS_LABEL),
    "externalIps": either(st.lists(st.ip_addresses().map(str), max_size=3)),
    "promotePolicies": either(st.lists(st.fixed_dictionaries(
        {"nodeCount": either(INTS)}, optional={"labelSelector": either(SELECTOR)}), max_size=2)),
    "promoteResources": either(st.fixed_dictionaries({}, optional={
        "nodes": either(st.lists(NAMES, max_size=3)),
        "nodeInfos": either(st.lists(st.fixed_dictionaries({"nodeName": either(NAMES)}), max_size=2)),
        "resources": either(st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]) | st.text(max_size=10),
                                            QUANTITIES, max_size=3))})),
    "kubeInKubeConfig": either(st.fixed_dictionaries({}, optional={
        "apiServerReplicas": either(INTS),
        "apiServerServiceType": either(st.sampled_from(["nodePort", "hostNetwork", "LoadBalancer"])),
        "externalPort": either(INTS), "forceDestroy": either(st.booleans()),
        "etcdStorageClass": either(st.text(max_size=10)), "etcdUnitSize": either(QUANTITIES),
        "clusterCIDR": either(st.text(max_size=20))})),
    "kubeconfig": either(st.text(max_size=50)),
    "notInTheSchema": JSON,
})
CONDITION = st.fixed_dictionaries({
    "type": either(st.sampled_from(["Ready", "ControlPlaneReady", "NodesReady"])),
    "status": either(st.sampled_from(["True", "False", "Unknown", "Maybe"]))},
    optional={"reason": either(st.text(max_size=10)), "message": either(st.text(max_size=10)),
              "lastTransitionTime": either(TIMES), "observedGeneration": either(INTS)})
STATUS = st.fixed_dictionaries({}, optional={
    "phase": either(st.sampled_from(["Pending", "Preparing", "Initialized", "Completed", "Updating", "Deleting",
                                     "Bogus"])),
    "reason": either(st.text(max_size=20)), "message": either(st.text(max_size=20)),
    "updateTime": either(TIMES), "observedGeneration": either(INTS), "port": either(INTS),
    "controlPlaneEndpoint": either(st.text(max_size=30)),
    "conditions": either(st.lists(CONDITION, max_size=2)),
    "nodes": either(st.lists(st.fixed_dictionaries({
        "name": either(NAMES), "phase": either(st.sampled_from(["Claimed", "Joining", "Ready", "Releasing", "?"]))}),
        max_size=2)),
})
FINALIZERS = st.lists(st.one_of(st.just(FINALIZER), st.from_regex(r"[a-z]{1,8}\.io/[a-z]{1,8}", fullmatch=True),
                                st.text(max_size=20)), max_size=3)
SYSTEM_FIELDS = {
    "uid": either(st.uuids().map(str)),
    "resourceVersion": either(st.integers(0, 2**64).map(str)),
    "generation": either(INTS),
    "creationTimestamp": either(TIMES),
    "deletionTimestamp": either(TIMES),
    "deletionGracePeriodSeconds": either(INTS),
    "finalizers": either(FINALIZERS),
    "selfLink": JSON,
    "managedFields": JSON,
    "ownerReferences": JSON,
}
FUZZ_NS = "fuzz-objects"
METADATA = st.fixed_dictionaries({"name": either(NAMES)}, optional={
    "namespace": mostly(st.just(FUZZ_NS)),
    "generateName": either(NAMES),
    "labels": either(LABELS),
    "annotations": either(st.dictionaries(LABEL_KEYS, st.text(max_size=30), max_size=3)),
    **SYSTEM_FIELDS,
})
OBJECTS = st.fixed_dictionaries({
    "apiVersion": mostly(st.just("kosmos.io/v1alpha1")),
    "kind": mostly(st.just("VirtualCluster")),
    "metadata": mostly(METADATA),
}, optional={"spec": mostly(SPEC), "status": either(STATUS)})
WRITE_QUERIES = st.fixed_dictionaries({}, optional={
    "fieldValidation": st.sampled_from(["Strict", "Warn", "Ignore", "strict", "Warn", "Ignore", "bogus", ""]),
    "dryRun": st.sampled_from(["All", "All", "All", "all"]),
})
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@examples(120)
@given(obj=OBJECTS, query=WRITE_QUERIES)
async def test_hypothesis_objects_are_created_as_the_server_says_or_refused_with_a_status(
        http: aiohttp.ClientSession, server: Server, obj: dict[str, Any],
        query: dict[str, str]) -> None:
    start = log_mark(server)
    code, created = await call(http, "POST", collection(FUZZ_NS), dumps(obj), params=query)
    tally("hypothesis objects (create)", code)
    if code == 201:
        meta, sent = created["metadata"], obj["metadata"]
        assert meta["namespace"] == FUZZ_NS
        assert meta["generation"] == 1, "generation starts at 1, whatever was sent"
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", meta["uid"])
        assert meta["uid"] != sent.get("uid"), "the uid is the server's"
        assert RFC3339.fullmatch(meta["creationTimestamp"]) and meta["creationTimestamp"] != "2024-01-02T03:04:05Z"
        assert "deletionTimestamp" not in meta and "deletionGracePeriodSeconds" not in meta
        assert FINALIZER in meta["finalizers"]
        assert "status" not in created, "status is the reconciler's to write"
        assert ints_fit_int64(created)
        got_code, got = await call(http, "GET", f"{collection(FUZZ_NS)}/{meta['name']}")
        if query.get("dryRun") == "All":
            assert got_code == 404, "a dry run persists nothing"
        else:
            assert got_code == 200 and got["metadata"]["uid"] == meta["uid"] and got.get("spec") == created.get("spec")
            await remove(http, FUZZ_NS, meta["name"])
    await assert_survived(http, server, start)


def merge_patches() -> st.SearchStrategy[Any]:
    meta = st.fixed_dictionaries({}, optional={  # name and namespace: see the system-field test
        "labels": either(LABELS | st.none()), "annotations": JSON, **SYSTEM_FIELDS})
    return st.fixed_dictionaries({}, optional={
        "apiVersion": mostly(st.just("kosmos.io/v1alpha1")), "kind": mostly(st.just("VirtualCluster")),
        "metadata": mostly(meta), "spec": either(SPEC), "status": either(STATUS)})


POINTERS = mostly(st.sampled_from([
    "", "/", "/metadata", "/metadata/uid", "/metadata/resourceVersion", "/metadata/generation",
    "/metadata/creationTimestamp", "/metadata/deletionTimestamp", "/metadata/deletionGracePeriodSeconds",
    "/metadata/finalizers", "/metadata/finalizers/0", "/metadata/finalizers/-", "/metadata/finalizers/99999999999999999999",
    "/metadata/labels", "/metadata/labels/a~1b", "/metadata/name", "/metadata/namespace", "/metadata/~2",
    "/spec", "/spec/externalIP", "/spec/promotePolicies", "/spec/promotePolicies/0/nodeCount", "/spec/kubeconfig",
    "/status", "/status/phase", "/status/observedGeneration", "/status/conditions/-", "/apiVersion", "/kind",
]) | st.text(max_size=20))
JSON_PATCH_OPS = st.fixed_dictionaries(
    {"op": mostly(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"])),
     "path": POINTERS, "value": either(st.sampled_from([FINALIZER, "2024-01-02T03:04:05Z", "0", 7])),
     "from": POINTERS})
JSON_PATCHES = mostly(st.lists(JSON_PATCH_OPS, max_size=4))
PATCH_NS = "fuzz-patches"
PATCH_TARGET = "target"


@examples(100)
@given(data=st.data(), kind=st.sampled_from(["merge", "json"]), subresource=st.sampled_from(["", "/status"]))
async def test_hypothesis_patches_never_rewrite_what_only_the_server_writes(
        http: aiohttp.ClientSession, server: Server, data: st.DataObject, kind: str,
        subresource: str) -> None:
    """Merge and JSON patches of every shape, on the object and on /status, many aimed at system fields.

    Each patch is made conditional on the resourceVersion just read (so the reconciler's own
    status writes cannot race it); when one lands: uid, name, namespace and creationTimestamp
    are untouched, no deletionTimestamp appears, the resourceVersion is the server's; a main
    write keeps status and bumps generation exactly when spec changed; a status write changes
    nothing but status.
    """
    start = log_mark(server)
    before = await ensure(http, PATCH_NS, PATCH_TARGET)
    rv = before["metadata"]["resourceVersion"]
    if kind == "merge":
        patch = data.draw(merge_patches(), "merge patch")
        if isinstance(patch.get("metadata"), dict) and "resourceVersion" not in patch["metadata"]:
            patch["metadata"]["resourceVersion"] = rv
        elif "metadata" not in patch:
            patch["metadata"] = {"resourceVersion": rv}
        content_type = "application/merge-patch+json"
    else:
        patch = data.draw(JSON_PATCHES, "JSON patch")
        if isinstance(patch, list):
            patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, *patch]
        content_type = "application/json-patch+json"
    path = f"{collection(PATCH_NS)}/{PATCH_TARGET}{subresource}"
    code, after = await call(http, "PATCH", path, dumps(patch), content_type=content_type)
    tally(f"hypothesis {kind} patches{subresource and ' on /status'}", code)
    if code == 200:
        meta, old = after["metadata"], before["metadata"]
        for system_field in ("uid", "name", "namespace", "creationTimestamp"):
            assert meta.get(system_field) == old.get(system_field), f"{system_field} was rewritten by {patch}"
        assert "deletionTimestamp" not in meta and "deletionGracePeriodSeconds" not in meta, patch
        assert re.fullmatch(r"[0-9]+", meta["resourceVersion"]) and int(meta["resourceVersion"]) >= int(rv)
        assert ints_fit_int64(after)
        if subresource == "/status":
            assert after.get("spec") == before.get("spec"), "a status write changed spec"
            assert {k: v for k, v in meta.items() if k != "resourceVersion"} == \
                   {k: v for k, v in old.items() if k != "resourceVersion"}, "a status write changed metadata"
        else:
            assert after.get("status") == before.get("status"), "a main-resource write changed status"
            bumped = 1 if after.get("spec") != before.get("spec") else 0
            assert meta["generation"] == old["generation"] + bumped, patch
            assert all(isinstance(f, str) for f in meta.get("finalizers") or [])
        got_code, got = await call(http, "GET", f"{collection(PATCH_NS)}/{PATCH_TARGET}")
        assert got_code == 200 and got["metadata"]["uid"] == old["uid"] and got.get("spec") == after.get("spec")
    await assert_survived(http, server, start)


# -- 3. hand-picked hostile input --------------------------------------------------------------

def nested(depth: int, kind: str = "object") -> bytes:
    """A JSON value nested ``depth`` levels deep."""
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"[" * depth + b"]" * depth


def inside(field_json: bytes, name: str = "deep", namespace: str = "fuzz-deep", rv: str | None = None) -> bytes:
    """A VirtualCluster whose spec carries ``field_json`` (as an unknown field)."""
    meta = {"name": name, **({"resourceVersion": rv} if rv else {})}
    head = dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta})[:-1]
    return head + b',"spec":{"x":' + field_json + b"}}"


@pytest.mark.parametrize("depth", [101, 1_000, 10_000, 100_000])
async def test_deeply_nested_json_is_refused_with_400_everywhere_a_body_is_read(
        http: aiohttp.ClientSession, server: Server, log_start: int, depth: int) -> None:
    ns = "fuzz-deep"
    target = await ensure(http, ns, "target")
    rv = target["metadata"]["resourceVersion"]
    item = f"{collection(ns)}/target"
    for shape in ("object", "array"):
        deep = nested(depth, shape)
        attempts = [
            ("POST", collection(ns), deep, "application/json"),
            ("POST", collection(ns), inside(deep), "application/json"),
            ("PUT", item, inside(deep, "target", ns, rv), "application/json"),
            ("PUT", item + "/status", inside(deep, "target", ns, rv), "application/json"),
            ("PATCH", item, b'{"spec":{"x":' + deep + b"}}", "application/merge-patch+json"),
            ("PATCH", item, b'[{"op":"add","path":"/spec/x","value":' + deep + b"}]", "application/json-patch+json"),
            ("PATCH", item + "/status", b'{"status":{"x":' + deep + b"}}", "application/merge-patch+json"),
            ("DELETE", item, b'{"kind":"DeleteOptions","preconditions":' + deep + b"}", "application/json"),
            ("DELETE", collection(ns), b'{"kind":"DeleteOptions","x":' + deep + b"}", "application/json"),
        ]
        for method, path, body, content_type in attempts:
            code, status = await call(http, method, path, body, content_type=content_type)
            assert code == 400, f"{method} {path} nested {depth}: {code} {status}"
    code, after = await call(http, "GET", item)
    assert code == 200 and after["metadata"]["resourceVersion"] == rv, "nothing was written"
    await assert_survived(http, server, log_start)


def sized(size: int, name: str, namespace: str, rv: str | None = None) -> bytes:
    """A valid VirtualCluster whose body is exactly ``size`` bytes (the bulk in spec.kubeconfig)."""
    meta: dict[str, Any] = {"name": name, **({"resourceVersion": rv} if rv else {})}
    empty = dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta,
                   "spec": {"kubeconfig": ""}})
    body = dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": meta,
                  "spec": {"kubeconfig": "k" * (size - len(empty))}})
    assert len(body) == size
    return body


async def test_bodies_near_and_over_the_3_mib_limit_are_refused_with_413(
        http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    ns = "fuzz-huge"
    target = await ensure(http, ns, "target")
    rv = target["metadata"]["resourceVersion"]
    item = f"{collection(ns)}/target"
    over, near = MAX_BODY + 1, MAX_BODY - 4096
    attempts = [
        ("POST", collection(ns), sized(over, "huge", ns), "application/json"),
        ("POST", collection(ns), sized(near, "huge", ns), "application/json"),  # too large for storage
        ("PUT", item, sized(over, "target", ns, rv), "application/json"),
        ("PUT", item, sized(near, "target", ns, rv), "application/json"),
        ("PATCH", item, b'{"spec":{"kubeconfig":"' + b"k" * (over - 30) + b'"}}', "application/merge-patch+json"),
        ("PATCH", item, b'{"spec":{"kubeconfig":"' + b"k" * (near - 30) + b'"}}', "application/merge-patch+json"),
        ("PATCH", item, b'[{"op":"add","path":"/spec/kubeconfig","value":"' + b"k" * (near - 60) + b'"}]',
         "application/json-patch+json"),
        ("PATCH", item + "/status", b'{"status":{"message":"' + b"m" * (near - 30) + b'"}}',
         "application/merge-patch+json"),
        ("DELETE", item, b'{"kind":"DeleteOptions","x":"' + b"x" * over + b'"}', "application/json"),
    ]
    for method, path, body, content_type in attempts:
        code, status = await call(http, method, path, body, content_type=content_type)
        assert code == 413, f"{method} {path} with {len(body)} bytes: {code} {status}"
        assert status["reason"] == "RequestEntityTooLarge"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit applies as it streams in
        for _ in range(4):
            yield b"x" * (1024 * 1024)
    code, status = await call(http, "POST", collection(ns), chunks())  # type: ignore[arg-type]
    assert code == 413, status
    code, after = await call(http, "GET", item)
    assert code == 200 and after["metadata"]["resourceVersion"] == rv, "nothing was written"
    code, _ = await call(http, "GET", f"{collection(ns)}/huge")
    assert code == 404
    await assert_survived(http, server, log_start)


async def test_long_urls_and_headers_are_read_like_kube_reads_them(
        http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    """Go reads up to 1 MiB of request line and headers: a long selector gets the selector's answer."""
    code, status = await call(http, "GET", collection("fuzz-long"), params={"labelSelector": "a" * 100_000})
    assert code == 400 and "unable to parse requirement" in status["message"]
    long_selector = ",".join(f"k{i}=v{i}" for i in range(5_000))
    code, body = await call(http, "GET", collection("fuzz-long"), params={"labelSelector": long_selector})
    assert code == 200 and body["items"] == []
    code, body = await call(http, "GET", collection("fuzz-long"), headers={"X-Padding": "p" * 32_000})
    assert code == 200
    await assert_survived(http, server, log_start)


INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]


@pytest.mark.parametrize("bad", INVALID_UTF8, ids=lambda b: b.hex())
async def test_invalid_utf8_in_bodies_paths_and_queries_gets_a_status(
        http: aiohttp.ClientSession, server: Server, log_start: int, bad: bytes) -> None:
    ns = "fuzz-utf8"
    target = await ensure(http, ns, "target")
    rv = target["metadata"]["resourceVersion"]
    item = f"{collection(ns)}/target"
    bodies = [
        ("POST", collection(ns), b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster","metadata":{"name":"u"'
                                 b',"labels":{"a":"' + bad + b'"}}}', "application/json"),
        ("POST", collection(ns), b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster","metadata":{"name":"u' +
         bad + b'"}}', "application/json"),
        ("PUT", item, b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster","metadata":{"name":"target",'
                      b'"resourceVersion":"' + rv.encode() + b'"},"spec":{"kubeconfig":"' + bad + b'"}}',
         "application/json"),
        ("PATCH", item, b'{"spec":{"kubeconfig":"' + bad + b'"}}', "application/merge-patch+json"),
        ("PATCH", item, b'[{"op":"add","path":"/spec/kubeconfig","value":"' + bad + b'"}]',
         "application/json-patch+json"),
        ("PATCH", item + "/status", b'{"status":{"message":"' + bad + b'"}}', "application/merge-patch+json"),
        ("DELETE", item, b'{"kind":"DeleteOptions","propagationPolicy":"' + bad + b'"}', "application/json"),
    ]
    for method, path, body, content_type in bodies:
        code, _ = await call(http, method, path, body, content_type=content_type)
        assert code < 500
    escaped = "".join(f"%{b:02X}" for b in bad)
    for path in [
        f"{collection(ns)}?labelSelector=a%3D{escaped}", f"{collection(ns)}?labelSelector={escaped}",
        f"{collection(ns)}?fieldSelector=metadata.name%3D{escaped}", f"{collection(ns)}?continue={escaped}",
        f"{collection(ns)}?resourceVersion={escaped}", f"{collection(ns)}?limit={escaped}",
        f"{collection(ns)}?watch={escaped}", f"{collection(ns)}/{escaped}", f"{GV}/namespaces/{escaped}/virtualclusters",
        f"{collection(ns)}/{escaped}/status", f"{collection(ns)}/{escaped}/kubeconfig",
        f"{collection(ns)}/target/kubeconfig?expirationSeconds={escaped}", f"{collection(ns)}/target?{escaped}={escaped}",
    ]:
        await call(http, "GET", raw_path(path))
    for query in (f"dryRun={escaped}", f"fieldValidation={escaped}", f"propagationPolicy={escaped}",
                  f"gracePeriodSeconds={escaped}"):
        code, _ = await call(http, "DELETE", raw_path(f"{item}?{query}"))
        assert code in (400, 422), query
    code, _ = await call(http, "DELETE", raw_path(f"{collection(ns)}/{escaped}"))
    assert code == 404
    code, after = await call(http, "GET", item)
    assert code == 200 and after["metadata"]["uid"] == target["metadata"]["uid"]
    await assert_survived(http, server, log_start)


async def test_unknown_fields_named_with_control_characters_come_back_as_escaped_warnings(
        http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    """Field names end up in Warning headers, where control characters may not go: escaped, never a dropped
    connection."""
    ns = "fuzz-warnings"
    await ensure(http, ns, "target")
    for key in ("\x1f", "a\r\nX-Injected: 1", "\x00", "\x7f", "tab\there", "\u2028", "\u00e9"):
        for method, path, body, content_type in [
            ("POST", collection(ns), {**vc("w", ns), "spec": {key: 1}}, "application/json"),
            ("PATCH", f"{collection(ns)}/target", {"spec": {key: 1}}, "application/merge-patch+json"),
            ("PATCH", f"{collection(ns)}/target/status", {"status": {key: 1}}, "application/merge-patch+json"),
        ]:
            async with http.request(method, path, data=dumps(body), params={"dryRun": "All"},
                                    headers={"Content-Type": content_type}) as resp:
                assert resp.status in (200, 201), await resp.text()
                warnings = resp.headers.getall("Warning", [])
                assert "X-Injected" not in resp.headers
                assert len(warnings) == 1 and warnings[0].startswith('299 - "unknown field'), warnings
                assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in warnings[0]), warnings
    await assert_survived(http, server, log_start)


NUMBER_TOKENS = ["1e400", "-1e400", "1e308", str(2**70), str(-(2**70)), str(2**63), str(2**64), str(-(2**63) - 1),
                 str(2**63 - 1), "1.5", "-0", "1e-400", "NaN", "Infinity", "-Infinity", "1E+2",
                 "123456789012345678901234567890.5"]
NUMBER_FIELDS = [
    ("spec", "promotePolicies", 0, "nodeCount"),
    ("spec", "kubeInKubeConfig", "apiServerReplicas"),
    ("spec", "kubeInKubeConfig", "externalPort"),
    ("spec", "kubeInKubeConfig", "etcdUnitSize"),
    ("spec", "promoteResources", "resources", "cpu"),
    ("spec", "kubeconfig"),
    ("metadata", "generation"),
    ("metadata", "deletionGracePeriodSeconds"),
    ("metadata", "labels", "n"),
    ("status", "port"),
    ("status", "observedGeneration"),
    ("status", "conditions", 0, "observedGeneration"),
]
PLACEHOLDER = "__NUMBER__"


def with_value(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``obj`` with ``value`` at ``path`` (containers created as needed)."""
    out = copy.deepcopy(obj)
    node = out
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, list):
            while len(node) <= key:
                node.append({})
            node = node[key]
            continue
        if key not in node or not isinstance(node[key], dict | list):
            node[key] = [] if isinstance(nxt, int) else {}
        node = node[key]
    if isinstance(node, list):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = value
    return out


async def test_numbers_out_of_range_are_refused_or_stored_in_range(
        http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    """1e400, 2**70, NaN and friends in every numeric field: 4xx, or a stored value that fits int64."""
    ns = "fuzz-numbers"
    target = await ensure(http, ns, "target")
    status_path = f"{collection(ns)}/target/status"
    answers: dict[int, int] = {}
    for f, fld in enumerate(NUMBER_FIELDS):
        for t, token in enumerate(NUMBER_TOKENS):
            name = f"n{f}-{t}"
            obj = with_value(vc(name, ns), fld, PLACEHOLDER)
            body = dumps(obj).replace(f'"{PLACEHOLDER}"'.encode(), token.encode())
            code, created = await call(http, "POST", collection(ns), body)
            answers[code] = answers.get(code, 0) + 1
            if code == 201:
                assert ints_fit_int64(created), created
                got_code, got = await call(http, "GET", f"{collection(ns)}/{name}")
                assert got_code == 200 and ints_fit_int64(got)
                await remove(http, ns, name)
            if fld[0] == "status":
                _, current = await call(http, "GET", status_path)
                update = with_value(current, fld, PLACEHOLDER)
                body = dumps(update).replace(f'"{PLACEHOLDER}"'.encode(), token.encode())
                code, updated = await call(http, "PUT", status_path, body)
                answers[code] = answers.get(code, 0) + 1
                if code == 200:
                    assert ints_fit_int64(updated), updated
                patch = dumps(with_value({}, fld, PLACEHOLDER)).replace(f'"{PLACEHOLDER}"'.encode(), token.encode())
                code, patched = await call(http, "PATCH", status_path, patch,
                                           content_type="application/merge-patch+json")
                answers[code] = answers.get(code, 0) + 1
                if code == 200:
                    assert ints_fit_int64(patched), patched
    print(f"numbers: answers {dict(sorted(answers.items()))}")
    code, after = await call(http, "GET", f"{collection(ns)}/target")
    assert code == 200 and ints_fit_int64(after) and after["metadata"]["uid"] == target["metadata"]["uid"]
    await assert_survived(http, server, log_start)


async def test_duplicate_keys_follow_field_validation(http: aiohttp.ClientSession, server: Server,
                                                      log_start: int) -> None:
    """Strict refuses them (400), Warn keeps the last value with a warning, Ignore keeps the last silently."""
    ns = "fuzz-dupes"

    def body(name: str) -> bytes:
        return (b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster","metadata":{"name":"first","name":"'
                + name.encode() + b'"},"spec":{"externalIP":"192.0.2.1","externalIP":"192.0.2.2"}}')
    code, status = await call(http, "POST", collection(ns), body("strict"), params={"fieldValidation": "Strict"})
    assert code == 400 and 'duplicate field "name"' in status["message"]
    for mode in ("Warn", "Ignore"):
        async with http.post(collection(ns), data=body(mode.lower()), params={"fieldValidation": mode},
                             headers={"Content-Type": "application/json"}) as resp:
            created = await resp.json()
            assert resp.status == 201, created
            warnings = resp.headers.getall("Warning", [])
        assert created["metadata"]["name"] == mode.lower() and created["spec"]["externalIP"] == "192.0.2.2"
        assert any("duplicate field" in w for w in warnings) == (mode == "Warn"), warnings
    code, patched = await call(http, "PATCH", f"{collection(ns)}/warn",
                               b'{"metadata":{"labels":{"a":"1","a":"2"}}}', content_type="application/merge-patch+json")
    assert code == 200 and patched["metadata"]["labels"] == {"a": "2"}
    code, _ = await call(http, "GET", f"{collection(ns)}/first")
    assert code == 404
    await assert_survived(http, server, log_start)


FULL_SPEC = {
    "externalIP": "192.0.2.10", "externalIps": ["192.0.2.11"],
    "promotePolicies": [{"labelSelector": {"matchLabels": {"zone": "a"}, "matchExpressions": [
        {"key": "type", "operator": "In", "values": ["kwok"]}]}, "nodeCount": 1}],
    "promoteResources": {"nodes": ["n1"], "nodeInfos": [{"nodeName": "n2"}], "resources": {"cpu": "1", "memory": "1Gi"}},
    "kubeInKubeConfig": {"apiServerReplicas": 1, "apiServerServiceType": "nodePort", "externalPort": 30443,
                         "forceDestroy": False, "etcdStorageClass": "standard", "etcdUnitSize": "1Gi",
                         "clusterCIDR": "10.0.0.0/16"},
    "kubeconfig": "",
}
FULL_STATUS = {
    "phase": "Pending", "reason": "r", "message": "m", "updateTime": "2024-01-02T03:04:05Z", "observedGeneration": 1,
    "controlPlaneEndpoint": "https://127.0.0.1:6443", "port": 6443,
    "conditions": [{"type": "Ready", "status": "False", "reason": "r", "message": "m",
                    "lastTransitionTime": "2024-01-02T03:04:05Z", "observedGeneration": 1}],
    "nodes": [{"name": "n1", "phase": "Claimed"}],
}


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a field or element of a JSON value (containers included)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from paths_of(child, (*prefix, key))


def nulled(obj: Any, path: tuple[Any, ...]) -> Any:
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = None
    return out


async def test_null_in_every_field_of_a_valid_object(http: aiohttp.ClientSession, server: Server,
                                                     log_start: int) -> None:
    ns = "fuzz-nulls"
    full = {**vc("full", ns, spec=FULL_SPEC, labels={"app": "x"}, annotations={"a": "b"},
                 finalizers=["example.com/f"]), "status": FULL_STATUS}
    target = await ensure(http, ns, "target", spec=FULL_SPEC)
    paths = list(paths_of(full))
    for i, path in enumerate(paths):
        name = f"null-{i}"
        obj = nulled(with_value(full, ("metadata", "name"), name), path)
        code, created = await call(http, "POST", collection(ns), dumps(obj))
        if code == 201:
            got_code, got = await call(http, "GET", f"{collection(ns)}/{created['metadata']['name']}")
            assert got_code == 200 and got["metadata"]["uid"] == created["metadata"]["uid"]
            await remove(http, ns, created["metadata"]["name"])
        for subresource in ("", "/status"):
            _, current = await call(http, "GET", f"{collection(ns)}/target")
            update = nulled({**current, "spec": FULL_SPEC, "status": FULL_STATUS,
                             "metadata": {**current["metadata"], **full["metadata"], "name": "target",
                                          "resourceVersion": current["metadata"]["resourceVersion"]}}, path)
            code, updated = await call(http, "PUT", f"{collection(ns)}/target{subresource}", dumps(update))
            if code == 200:
                assert updated["metadata"]["uid"] == target["metadata"]["uid"], path
                assert "deletionTimestamp" not in updated["metadata"]
    print(f"null in {len(paths)} fields, created and updated")
    await assert_survived(http, server, log_start)


SYSTEM_PATCH_VALUES = [None, "x", -1, 2**62, {}, "2024-01-02T03:04:05Z", [FINALIZER, 7], ["bad finalizer!"]]
SYSTEM_FIELD_NAMES = ["uid", "creationTimestamp", "resourceVersion", "generation", "finalizers", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "selfLink", "managedFields", "name", "namespace"]


async def test_patches_aimed_at_system_fields_change_none_of_them(http: aiohttp.ClientSession, server: Server,
                                                                  log_start: int) -> None:
    """uid, creationTimestamp, resourceVersion, generation, deletionTimestamp stay the server's; finalizers
    take only valid names; on /status, metadata does not move at all."""
    ns = "fuzz-system"
    target = await ensure(http, ns, "target")
    item = f"{collection(ns)}/target"
    answers: dict[int, int] = {}
    for field_name in SYSTEM_FIELD_NAMES:
        for value in SYSTEM_PATCH_VALUES:
            for subresource in ("", "/status"):
                attempts = [
                    (dumps({"metadata": {field_name: value}}), "application/merge-patch+json"),
                    (dumps([{"op": "replace", "path": f"/metadata/{field_name}", "value": value}]),
                     "application/json-patch+json"),
                    (dumps([{"op": "add", "path": f"/metadata/{field_name}", "value": value}]),
                     "application/json-patch+json"),
                    (dumps([{"op": "remove", "path": f"/metadata/{field_name}"}]), "application/json-patch+json"),
                ]
                for body, content_type in attempts:
                    _, before = await call(http, "GET", item)
                    code, after = await call(http, "PATCH", item + subresource, body, content_type=content_type)
                    answers[code] = answers.get(code, 0) + 1
                    if code != 200:
                        continue
                    meta, old = after["metadata"], before["metadata"]
                    for kept in ("uid", "creationTimestamp", "name", "namespace", "generation"):
                        assert meta.get(kept) == old.get(kept), f"{kept} changed by {body!r} on {subresource or '/'}"
                    assert "deletionTimestamp" not in meta and "deletionGracePeriodSeconds" not in meta, body
                    assert "selfLink" not in meta and "managedFields" not in meta, body
                    assert int(meta["resourceVersion"]) >= int(old["resourceVersion"])
                    if subresource:
                        assert meta.get("finalizers") == old.get("finalizers"), body
                    assert all(isinstance(f, str) for f in meta.get("finalizers") or []), body
    code, final = await call(http, "GET", item)
    assert code == 200 and final["metadata"]["uid"] == target["metadata"]["uid"]
    assert final["metadata"]["creationTimestamp"] == target["metadata"]["creationTimestamp"]
    print(f"system-field patches: answers {dict(sorted(answers.items()))}")
    await assert_survived(http, server, log_start)


ODD_LABEL_SELECTORS = [
    "", " ", ",", ",,", "=", "==", "!=", "!", "!!a", "a", "a=", "a==", "a!=", "a=b=c", "a in", "a in (", "a in ()",
    "a in (,)", "a notin (b,", "a in (b c)", "(a)", "a,", ",a", "a=b,,c=d", "a>", "a>b", "a<1", "a>1.5", "a>-1",
    "a>99999999999999999999", "x/y=z", "/a=b", "a/=b", "a/b/c=d", "a" * 64 + "=b", "a=" + "b" * 64,
    "a\x00=b", "a=b\x00", "a=\t\nb", "\u00e9=b", "a=\u00e9", "a\u2028b", "a=\"b\"", "a='b'", "a=%FF", "a in (b)in",
    "!a=b", "a=b;c=d", "a==b==c", "in", "notin", "in in (in)", "a notin ()", "{", "}", "a=b)", "a=(b)",
]
ODD_FIELD_SELECTORS = [
    "", "=", ",", "metadata.name", "metadata.name=", "metadata.name==x", "metadata.name!=x", "metadata.name=x,",
    "metadata.name=a\\,b", "metadata.name=a\\", "metadata.name=a\\q", "metadata.name=a,b", "metadata.name=a=b",
    "metadata.namespace=other", "metadata.uid=x", "spec.externalIP=x", "status.phase=Pending", "x=y", "=x",
    "metadata.name=\x00", "metadata.name=..", "metadata.name=a/b", "metadata.name=%2F", "metadata.name=" + "a" * 300,
    "metadata.name=\u00e9", "metadata.name in (a)", "metadata.name>1",
]


async def test_odd_label_and_field_selectors_get_an_answer_or_a_400(http: aiohttp.ClientSession, server: Server,
                                                                    log_start: int) -> None:
    ns = "fuzz-selectors"
    await ensure(http, ns, "a")
    await ensure(http, ns, "b")
    for param, values in (("labelSelector", ODD_LABEL_SELECTORS), ("fieldSelector", ODD_FIELD_SELECTORS)):
        for value in values:
            for path in (collection(ns), f"{GV}/virtualclusters"):
                code, body = await call(http, "GET", path, params={param: value})
                assert code in (200, 400), (param, value, code, body)
                if code == 200:
                    assert all(item["metadata"]["namespace"] == ns for item in body["items"]) or \
                        path == f"{GV}/virtualclusters"
                code, _ = await call(http, "GET", path, params={param: value, "watch": "true", "timeoutSeconds": "0"})
                assert code in (200, 400), (param, value, code)
            code, _ = await call(http, "DELETE", collection(ns), params={param: value, "dryRun": "All"})
            assert code in (200, 400), (param, value, code)
    code, body = await call(http, "GET", collection(ns))
    assert sorted(item["metadata"]["name"] for item in body["items"]) == ["a", "b"], "dry runs deleted nothing"
    await assert_survived(http, server, log_start)


@examples(60)
@given(param=st.sampled_from(["labelSelector", "fieldSelector"]), value=st.text(max_size=40),
       watch=st.booleans())
async def test_hypothesis_selectors_get_an_answer_or_a_400(http: aiohttp.ClientSession, server: Server,
                                                           param: str, value: str,
                                                           watch: bool) -> None:
    start = log_mark(server)
    params = {param: value, **({"watch": "true", "timeoutSeconds": "0"} if watch else {})}
    code, _ = await call(http, "GET", collection("fuzz-selectors"), params=params)
    assert code in (200, 400)
    await assert_survived(http, server, start)


def continue_token(payload: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


CONTINUE_A, CONTINUE_B = "fuzz-continue-a", "fuzz-continue-b"


@pytest.fixture
async def two_namespaces(http: aiohttp.ClientSession) -> dict[str, list[str]]:
    """Three objects in each of two namespaces, so a token can be aimed at the other one."""
    names = {CONTINUE_A: ["a1", "a2", "a3"], CONTINUE_B: ["b1", "b2", "b3"]}
    for ns, objs in names.items():
        for name in objs:
            await ensure(http, ns, name)
    return names


async def list_all(http: aiohttp.ClientSession, path: str, **params: str) -> tuple[int, Any]:
    return await call(http, "GET", path, params=params)


async def test_forged_continue_tokens_never_reveal_another_namespace(
        http: aiohttp.ClientSession, server: Server, log_start: int, two_namespaces: dict[str, list[str]]) -> None:
    """A tampered, forged or foreign continue token is 400 or 410 — or, if it still decodes to a
    position in this namespace, a page of this namespace only. Never a B object on A's path."""
    path_a, path_b = collection(CONTINUE_A), collection(CONTINUE_B)
    code, page = await list_all(http, path_a, limit="1")
    assert code == 200 and [i["metadata"]["name"] for i in page["items"]] == ["a1"]
    real = page["metadata"]["continue"]
    rv = int(page["metadata"]["resourceVersion"])
    names, token = ["a1"], real
    while token:  # the real token pages through A exactly once
        code, page = await list_all(http, path_a, limit="1", **{"continue": token})
        assert code == 200
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
    assert names == ["a1", "a2", "a3"]
    _, page_b = await list_all(http, path_b, limit="1")
    _, page_all = await list_all(http, f"{GV}/virtualclusters", limit="1")
    decoded = json.loads(base64.urlsafe_b64decode(real + "=" * (-len(real) % 4)))
    forged = [
        page_b["metadata"]["continue"],                        # B's own token, replayed on A
        page_all["metadata"]["continue"],                      # a cluster-wide token, replayed on A
        real[:-1], real + "A", real[::-1], real.upper(), "", " ", "%%%", "!!!!", "a" * 5000,
        base64.b64encode(json.dumps(decoded).encode()).decode(),  # standard alphabet, padded
        continue_token([1]), continue_token("x"), continue_token(None), continue_token({}),
        continue_token({**decoded, "v": "meta.k8s.io/v2"}),
    ]
    forged += [continue_token({**decoded, "rv": value}) for value in
               (0, -1, 1, rv + 1_000_000, 2**63 - 1, 2**63, 2**64, "3", 3.5, True, None, [rv], {"rv": rv})]
    forged += [continue_token({**decoded, "start": value}) for value in
               (f"../{CONTINUE_B}/b1", f"../{CONTINUE_B}/", f"/{CONTINUE_B}/b1", f"{CONTINUE_B}/b1",
                f"{CONTINUE_B}/b1\x00", "..", ".", "/", "", "\x00", "a1/../../x", "a1/./a2", "\\..\\x", "a1%2F..",
                "\uffff", 7, None, ["a1"])]
    for token in forged:
        for limit in ("1", "2", "0", "500"):
            code, body = await list_all(http, path_a, limit=limit, **{"continue": token})
            assert code in (200, 400, 410), (token, code, body)
            if code == 200:
                namespaces = {item["metadata"]["namespace"] for item in body["items"]}
                assert namespaces <= {CONTINUE_A}, f"token {token!r} showed {namespaces} on {path_a}"
    await assert_survived(http, server, log_start)


@examples(60)
@given(mutation=st.one_of(st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
                          st.text(max_size=60),
                          st.fixed_dictionaries({"v": st.just("meta.k8s.io/v1") | st.text(max_size=5),
                                                 "rv": JSON_SCALARS, "start": JSON_SCALARS}).map(continue_token)),
       limit=st.sampled_from(["1", "2", "0", "-1", "abc", str(2**63), "99999999999999999999", ""]))
async def test_hypothesis_continue_tokens_never_reveal_another_namespace(
        http: aiohttp.ClientSession, server: Server, two_namespaces: dict[str, list[str]],
        mutation: str, limit: str) -> None:
    start = log_mark(server)
    code, body = await list_all(http, collection(CONTINUE_A), limit=limit, **{"continue": mutation})
    assert code in (200, 400, 410), (mutation, limit, code)
    if code == 200:
        assert {item["metadata"]["namespace"] for item in body["items"]} <= {CONTINUE_A}
    await assert_survived(http, server, start)


async def test_bad_resource_version_timeout_and_watch_parameters_get_a_400(
        http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    ns = "fuzz-params"
    await ensure(http, ns, "target")
    path = collection(ns)
    for rv in ("-1", "abc", "1.5", "1e3", "\u0663", " 1", "1 ", "+1", "0x10", "1_0", str(2**63), str(2**64),
               "9" * 40):
        for watch in ("false", "true"):
            code, status = await call(http, "GET", path, params={"resourceVersion": rv, "watch": watch,
                                                                 "timeoutSeconds": "0"})
            assert code == 400, (rv, watch, code, status)
        code, _ = await call(http, "GET", path, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
        assert code == 400, rv
    for match in ("exact", "NotOlderThan ", "Bogus", "\u0000"):
        code, _ = await call(http, "GET", path, params={"resourceVersion": "1", "resourceVersionMatch": match})
        assert code in (400, 422), match
    for timeout in ("abc", "1.5", "1e400", "9" * 30, str(2**63), "\u0663", " 1"):
        code, _ = await call(http, "GET", path, params={"watch": "true", "timeoutSeconds": timeout})
        assert code == 400, timeout
    for timeout in ("-5", "0", str(2**63 - 1)):
        async with http.get(path, params={"watch": "true", "timeoutSeconds": timeout}) as resp:
            assert resp.status == 200
            first = await resp.content.readline()  # the synthetic ADDED of the target, then we leave
            assert json.loads(first)["type"] == "ADDED"
    for watch in ("yes", "2", "on", "\u0000", "true "):  # what Go's strconv.ParseBool refuses too
        code, _ = await call(http, "GET", path, params={"watch": watch})
        assert code == 400, watch
    for param in ("allowWatchBookmarks", "sendInitialEvents"):
        code, _ = await call(http, "GET", path, params={"watch": "true", "timeoutSeconds": "0", param: "maybe"})
        assert code in (400, 422), param
    # A resourceVersion in int64 range that the server has not reached: kube's 504 ResourceVersionTooLarge.
    for params in ({"resourceVersion": str(2**63 - 1)}, {"resourceVersion": str(2**63 - 1), "watch": "true"},
                   {"resourceVersion": str(2**63 - 1), "resourceVersionMatch": "Exact"}):
        code, status = await call(http, "GET", path, params=params, future_rv=True)
        assert code == 504 and too_large_resource_version(status), (params, status)
    await assert_survived(http, server, log_start)


KNOWN_PARAMS = {"watch", "labelSelector", "fieldSelector", "limit", "continue", "resourceVersion",
                "resourceVersionMatch", "timeoutSeconds", "allowWatchBookmarks", "sendInitialEvents", "dryRun",
                "fieldValidation", "fieldManager", "propagationPolicy", "gracePeriodSeconds", "includeObject",
                "expirationSeconds", "orphanDependents", "pretty"}


@examples(40)
@given(extra=st.dictionaries(st.text(min_size=1, max_size=15).filter(lambda k: k not in KNOWN_PARAMS),
                             st.text(max_size=15), min_size=1, max_size=4))
async def test_unknown_query_parameters_are_ignored(http: aiohttp.ClientSession, server: Server, extra: dict[str, str]) -> None:
    start = log_mark(server)
    ns = "fuzz-unknown"
    target = await ensure(http, ns, "target")
    code, body = await call(http, "GET", collection(ns), params=extra)
    assert code == 200 and [i["metadata"]["name"] for i in body["items"]] == ["target"]
    code, body = await call(http, "GET", f"{collection(ns)}/target", params=extra)
    assert code == 200 and body["metadata"]["uid"] == target["metadata"]["uid"]
    code, body = await call(http, "PATCH", f"{collection(ns)}/target", b'{"metadata":{"labels":{"seen":"yes"}}}',
                            params=extra, content_type="application/merge-patch+json")
    assert code == 200
    await assert_survived(http, server, start)


async def test_the_server_is_still_ready_after_all_of_it(http: aiohttp.ClientSession) -> None:
    async with http.get("/readyz", params={"verbose": "1"}) as resp:
        text = await resp.text()
        assert resp.status == 200 and "readyz check passed" in text, text
    for fuzzer, counts in TALLY.items():
        print(f"{fuzzer}: {sum(counts.values())} requests, answers {dict(sorted(counts.items()))}")
