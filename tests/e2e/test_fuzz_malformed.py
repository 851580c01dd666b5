"""Malformed and oversized requests get a Status, never a 5xx or a traceback: JSON nested up to
100,000 deep wherever a body is read (400), bodies near and over the 3 MiB limit (413), URLs and
headers as long as Go reads them, invalid UTF-8 in bodies, paths and queries. Nothing is written
by any of them, and the server is still ready afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.conftest import Server
from tests.support.bodies import inside, nested, sized
from tests.support.client import GV, assert_survived, call, collection, ensure, raw_path

pytestmark = pytest.mark.e2e


MAX_BODY = 3 * 1024 * 1024


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
        f"{collection(ns)}?watch={escaped}&timeoutSeconds=1", f"{collection(ns)}/{escaped}", f"{GV}/namespaces/{escaped}/virtualclusters",
        f"{collection(ns)}/{escaped}/status", f"{collection(ns)}/{escaped}/kubeconfig",
        f"{collection(ns)}/target/kubeconfig?expirationSeconds={escaped}", f"{collection(ns)}/target?{escaped}={escaped}",
    ]:
        await call(http, "GET", raw_path(path))
    for query in (f"dryRun={escaped}", f"propagationPolicy={escaped}", f"gracePeriodSeconds={escaped}"):
        code, _ = await call(http, "DELETE", raw_path(f"{item}?{query}"))
        assert code in (400, 422), query
    code, _ = await call(http, "DELETE", raw_path(f"{collection(ns)}/{escaped}"))
    assert code == 404
    code, after = await call(http, "GET", item)
    assert code == 200 and after["metadata"]["uid"] == target["metadata"]["uid"]
    await assert_survived(http, server, log_start)
