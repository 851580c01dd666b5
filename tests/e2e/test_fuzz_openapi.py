"""Schemathesis, driven by our own OpenAPI v3 document: every operation gets requests that are valid
and invalid for that document, at random paths and at a real object. Every answer keeps the Status
contract (``tests/support/status.py``), a successful one conforms to the document, and the server
is still ready afterwards with no traceback in its log. ``VC_SOAK=1`` runs many more (and
non-deterministic) examples.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.conftest import Server, vc
from tests.support.client import collection
from tests.support.report import tally
from tests.support.status import check_answer, check_watch_stream
from tests.support.strategies import examples

pytestmark = pytest.mark.e2e


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
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}/credentials",
    "GET /apis/kosmos.io/v1alpha1/virtualclustercredentials",
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclustercredentials",
    "DELETE /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclustercredentials",
    "GET /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclustercredentials/{name}",
    "DELETE /apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclustercredentials/{name}",
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
