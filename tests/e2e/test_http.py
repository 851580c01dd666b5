"""The REST surface on the wire: status codes, Status bodies and content negotiation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.conftest import HISTORY, Server, vc

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
JSON = {"Content-Type": "application/json"}


def coll(ns: str) -> str:
    return f"{GV}/namespaces/{ns}/virtualclusters"


async def status_of(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    body = await resp.json(content_type=None)
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    assert body["code"] == resp.status
    return body


async def make(http: aiohttp.ClientSession, ns: str, name: str, **meta: Any) -> dict[str, Any]:
    async with http.post(coll(ns), json=vc(name, ns, **meta)) as resp:
        assert resp.status == 201, await resp.text()
        return await resp.json()


async def test_malformed_json_is_bad_request(http: aiohttp.ClientSession, namespace: str) -> None:
    async with http.post(coll(namespace), data=b'{"apiVersion": ', headers=JSON) as resp:
        assert resp.status == 400
        assert (await status_of(resp))["reason"] == "BadRequest"


async def test_body_over_three_mebibytes_is_too_large(http: aiohttp.ClientSession, namespace: str) -> None:
    big = vc("big", namespace)
    big["metadata"]["annotations"] = {"x": "a" * (3 * 1024 * 1024 + 10)}
    async with http.post(coll(namespace), data=json.dumps(big), headers=JSON) as resp:
        assert resp.status == 413
        assert (await status_of(resp))["reason"] == "RequestEntityTooLarge"


@pytest.mark.parametrize("field,value,code", [("kind", "Pod", 422), ("apiVersion", "v1", 400)])
async def test_a_wrong_api_version_is_a_bad_request_and_a_wrong_kind_invalid(
        http: aiohttp.ClientSession, namespace: str, field: str, value: str, code: int) -> None:
    """As for a CRD: another group-version does not decode (400); another kind of the group does,
    and validation refuses it (422, ``kind: Invalid value: "Pod": must be VirtualCluster``)."""
    body = vc("wrong", namespace)
    body[field] = value
    async with http.post(coll(namespace), json=body) as resp:
        assert resp.status == code
        status = await status_of(resp)
    if code == 422:
        assert status["details"]["causes"][0]["field"] == "kind"


async def test_namespace_mismatch_is_bad_request(http: aiohttp.ClientSession, namespace: str) -> None:
    async with http.post(coll(namespace), json=vc("x", "elsewhere")) as resp:
        assert resp.status == 400
        assert "does not match the namespace" in (await status_of(resp))["message"]


async def test_unknown_paths_are_not_found_as_kube_answers_them(http: aiohttp.ClientSession) -> None:
    """Under the group-version, Go's plain "404 page not found" (as for a CRD's); elsewhere a Status."""
    async with http.get("/apis/kosmos.io/v1alpha1/namespaces/x/widgets") as resp:
        assert resp.status == 404
        assert (resp.content_type, await resp.text()) == ("text/plain", "404 page not found\n")
    async with http.get("/apis/widgets.io/v1") as resp:
        assert resp.status == 404
        assert (await status_of(resp))["reason"] == "NotFound"


async def test_anonymous_is_unauthorized_except_health(server: Server) -> None:
    connector = aiohttp.TCPConnector(ssl=server.ssl(None))
    async with aiohttp.ClientSession(base_url=server.url, connector=connector) as anon:
        async with anon.get(GV) as resp:
            assert resp.status == 401
            assert (await status_of(resp))["reason"] == "Unauthorized"
        for path in ("/healthz", "/livez", "/readyz"):
            async with anon.get(path) as resp:
                assert resp.status == 200 and await resp.text() == "ok"


async def test_a_user_outside_system_masters_is_forbidden_in_standalone_mode(server: Server,
                                                                             namespace: str) -> None:
    connector = aiohttp.TCPConnector(ssl=server.ssl("user"))
    async with aiohttp.ClientSession(base_url=server.url, connector=connector) as alice:
        async with alice.get(coll(namespace)) as resp:
            assert resp.status == 403
            assert (await status_of(resp))["message"] == (
                f'User "alice" cannot list resource "virtualclusters" in API group "kosmos.io" in the namespace '
                f'"{namespace}"')


async def test_update_without_resource_version_is_invalid(http: aiohttp.ClientSession, namespace: str) -> None:
    await make(http, namespace, "norv")
    async with http.put(f"{coll(namespace)}/norv", json=vc("norv", namespace)) as resp:
        assert resp.status == 422
        body = await status_of(resp)
        assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"


async def test_main_writes_keep_status_and_status_writes_keep_spec(http: aiohttp.ClientSession,
                                                                   namespace: str) -> None:
    await make(http, namespace, "sub")
    patch = {"Content-Type": "application/merge-patch+json"}
    async with http.patch(f"{coll(namespace)}/sub/status", headers=patch,
                          data=json.dumps({"status": {"phase": "Preparing"}, "spec": {"externalIP": "1.2.3.4"}})) as r:
        assert r.status == 200, await r.text()
        after_status = await r.json()
    assert after_status["status"]["phase"] == "Preparing"
    assert "externalIP" not in after_status["spec"]
    assert after_status["metadata"]["generation"] == 1
    async with http.patch(f"{coll(namespace)}/sub", headers=patch,
                          data=json.dumps({"status": {"phase": "Completed"},
                                           "spec": {"promotePolicies": [{"nodeCount": 1}]}})) as r:
        after_main = await r.json()
    assert after_main["status"]["phase"] in ("Preparing", "Pending")  # the reconciler may have written since
    assert after_main["metadata"]["generation"] == 2


async def test_external_ip_is_immutable(http: aiohttp.ClientSession, namespace: str) -> None:
    async with http.post(coll(namespace), json=vc("imm", namespace, {"externalIP": "10.0.0.1"})) as r:
        assert r.status == 201
    async with http.patch(f"{coll(namespace)}/imm", headers={"Content-Type": "application/merge-patch+json"},
                          data=json.dumps({"spec": {"externalIP": "10.0.0.2"}})) as r:
        assert r.status == 422
        body = await status_of(r)
        assert body["details"]["causes"][0]["field"] == "spec.externalIP"
        assert "field is immutable" in body["message"]


async def test_delete_preconditions_are_checked(http: aiohttp.ClientSession, namespace: str) -> None:
    await make(http, namespace, "pre")
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}}
    async with http.delete(f"{coll(namespace)}/pre", json=options) as r:
        assert r.status == 409
        assert "the UID in the precondition (not-the-uid) does not match" in (await status_of(r))["message"]


async def test_list_paging_with_limit_and_continue(http: aiohttp.ClientSession, namespace: str) -> None:
    for i in range(5):
        await make(http, namespace, f"p{i}")
    names, token, pages = [], "", 0
    while True:
        params = {"limit": "2"} | ({"continue": token} if token else {})
        async with http.get(coll(namespace), params=params) as r:
            body = await r.json()
        pages += 1
        names += [i["metadata"]["name"] for i in body["items"]]
        token = body["metadata"].get("continue", "")
        if pages == 1:
            assert body["metadata"]["remainingItemCount"] == 3
        if not token:
            break
    assert names == [f"p{i}" for i in range(5)] and pages == 3


async def test_a_forged_continue_token_is_rejected(http: aiohttp.ClientSession, namespace: str) -> None:
    import base64
    forged = base64.urlsafe_b64encode(json.dumps(
        {"v": "meta.k8s.io/v1", "rv": 1, "start": "../other/x\u0000"}).encode()).decode()
    for token in ("garbage!!", forged):
        async with http.get(coll(namespace), params={"limit": "1", "continue": token}) as r:
            assert r.status in (400, 410)
            await status_of(r)


async def test_metadata_only_list_and_watch(http: aiohttp.ClientSession, namespace: str) -> None:
    await make(http, namespace, "meta1")
    accept = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
    async with http.get(coll(namespace), headers=accept) as r:
        body = await r.json()
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0]["metadata"]["name"] == "meta1" and "spec" not in body["items"][0]
    accept = {"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}
    async with http.get(coll(namespace), headers=accept, params={"watch": "1", "timeoutSeconds": "1"}) as r:
        first = json.loads(await r.content.readline())
    assert first["type"] == "ADDED" and first["object"]["kind"] == "PartialObjectMetadata"


async def test_watch_with_initial_events_ends_them_with_an_annotated_bookmark(http: aiohttp.ClientSession,
                                                                             namespace: str) -> None:
    await make(http, namespace, "ie")
    params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
              "resourceVersionMatch": "NotOlderThan", "resourceVersion": "", "timeoutSeconds": "2"}
    async with http.get(coll(namespace), params=params) as r:
        lines = [json.loads(line) for line in (await r.read()).splitlines() if line.strip()]
    assert [e["type"] for e in lines[:2]] == ["ADDED", "BOOKMARK"]
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    params.pop("resourceVersionMatch")
    async with http.get(coll(namespace), params=params) as r:
        assert r.status == 422


async def test_watch_from_a_revision_evicted_from_history_gets_an_expired_error_event(
        http: aiohttp.ClientSession, namespace: str) -> None:
    first = await make(http, namespace, "churn")
    for i in range(HISTORY + 5):  # the test server keeps HISTORY events
        async with http.patch(f"{coll(namespace)}/churn", data=json.dumps({"metadata": {"labels": {"i": str(i)}}}),
                              headers={"Content-Type": "application/merge-patch+json"}) as r:
            assert r.status == 200
    params = {"watch": "1", "resourceVersion": first["metadata"]["resourceVersion"]}
    async with http.get(coll(namespace), params=params) as r:
        event = json.loads(await asyncio.wait_for(r.content.readline(), 10))
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


async def test_aggregated_discovery_has_an_etag_and_answers_304(http: aiohttp.ClientSession) -> None:
    accept = {"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}
    async with http.get("/apis", headers=accept) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
        etag = r.headers["ETag"]
        body = await r.json(content_type=None)
    resource = body["items"][0]["versions"][0]["resources"][0]
    assert resource["resource"] == "virtualclusters" and resource["responseKind"]["kind"] == "VirtualCluster"
    async with http.get("/apis", headers=accept | {"If-None-Match": etag}) as r:
        assert r.status == 304


async def test_version_and_metrics(http: aiohttp.ClientSession, namespace: str) -> None:
    await make(http, namespace, "metered")
    async with http.get("/version") as r:
        assert "gitVersion" in await r.json()
    async with http.get("/metrics") as r:
        text = await r.text()
    assert 'apiserver_request_total{code="201",group="kosmos.io",resource="virtualclusters",scope="resource",subresource="",verb="POST",version="v1alpha1"}' in text
    assert "etcd_request_duration_seconds_bucket" in text
    assert "apiserver_registered_watchers" in text


async def test_unsupported_accept_is_not_acceptable(http: aiohttp.ClientSession, namespace: str) -> None:
    async with http.get(coll(namespace), headers={"Accept": "text/plain"}) as r:
        assert r.status == 406
        assert "application/vnd.kubernetes.protobuf" in (await status_of(r))["message"]
    # No VirtualCluster is served in protobuf, but the Status saying so is, as kube encodes it.
    async with http.get(coll(namespace), headers={"Accept": "application/vnd.kubernetes.protobuf"}) as r:
        assert (r.status, r.content_type) == (406, "application/vnd.kubernetes.protobuf")
        assert (await r.read()).startswith(b"k8s\x00\n\x0c\n\x02v1\x12\x06Status")


async def test_table_include_object_none_and_invalid(http: aiohttp.ClientSession, namespace: str) -> None:
    await make(http, namespace, "tbl")
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    async with http.get(coll(namespace), headers=accept, params={"includeObject": "None"}) as r:
        body = await r.json()
    assert body["rows"][0]["cells"][0] == "tbl" and "object" not in body["rows"][0]
    async with http.get(coll(namespace), headers=accept, params={"includeObject": "Everything"}) as r:
        assert r.status == 400
