"""Hostile objects and patches: whatever a client writes, what only the server writes stays the
server's, and everything refused is refused with a Status (``tests/support/status.py``).

hypothesis builds objects, JSON merge patches and JSON patches, many aimed at the fields only the
server writes, and checks what a successful write may and may not change; hand-picked cases pin
out-of-range numbers, duplicate keys, null in every field, unknown fields named with control
characters, and patches aimed at each system field. After each, the server is still ready and
logged no traceback. ``VC_SOAK=1`` runs many more (and non-deterministic) examples.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.apis.resource import FINALIZER
from tests.conftest import Server, vc
from tests.support.bodies import nulled, paths_of, with_value
from tests.support.client import assert_survived, call, collection, dumps, ensure, log_mark, remove
from tests.support.report import tally
from tests.support.status import ints_fit_int64
from tests.support.strategies import FUZZ_NS, JSON_PATCHES, OBJECTS, WRITE_QUERIES, examples, merge_patches

pytestmark = pytest.mark.e2e


# -- hypothesis: objects, merge patches, JSON patches ----------------------------------------------

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
            # managedFields record the status manager's entry (kube records it too); nothing else moves
            server_kept = ("resourceVersion", "managedFields")
            assert {k: v for k, v in meta.items() if k not in server_kept} == \
                   {k: v for k, v in old.items() if k not in server_kept}, "a status write changed metadata"
        else:
            assert after.get("status") == before.get("status"), "a main-resource write changed status"
            bumped = 1 if after.get("spec") != before.get("spec") else 0
            assert meta["generation"] == old["generation"] + bumped, patch
            assert all(isinstance(f, str) for f in meta.get("finalizers") or [])
        got_code, got = await call(http, "GET", f"{collection(PATCH_NS)}/{PATCH_TARGET}")
        assert got_code == 200 and got["metadata"]["uid"] == old["uid"] and got.get("spec") == after.get("spec")
    await assert_survived(http, server, start)


# -- hand-picked ----------------------------------------------------------------------------------

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
    assert code == 400 and 'duplicate field "metadata.name", duplicate field "spec.externalIP"' in status["message"]
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
    "promoteResources": {"nodes": ["n1"], "nodeInfos": [{"nodeName": "n2"}], "resources": {"cpu": "1", "memory": "1Gi"},
                         "resourcesMode": "Shared"},
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
    "nodes": [{"name": "n1", "phase": "Claimed"}, {"name": "kosmos-shared-0", "phase": "Ready", "shared": True}],
    "sharedResources": {"namespace": "vcw-fuzz", "capacity": {"cpu": "1", "memory": "1Gi"}, "used": {"cpu": "100m"}},
}


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
                    assert "selfLink" not in meta, body
                    # managedFields are the server's rendering of what it decoded: garbage is ignored
                    assert all(e.get("fieldsType") == "FieldsV1" and e.get("operation") in ("Apply", "Update")
                               for e in meta.get("managedFields", [])), body
                    assert int(meta["resourceVersion"]) >= int(old["resourceVersion"])
                    if subresource:
                        assert meta.get("finalizers") == old.get("finalizers"), body
                    assert all(isinstance(f, str) for f in meta.get("finalizers") or []), body
    code, final = await call(http, "GET", item)
    assert code == 200 and final["metadata"]["uid"] == target["metadata"]["uid"]
    assert final["metadata"]["creationTimestamp"] == target["metadata"]["creationTimestamp"]
    print(f"system-field patches: answers {dict(sorted(answers.items()))}")
    await assert_survived(http, server, log_start)
