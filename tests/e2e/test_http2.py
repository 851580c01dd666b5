"""HTTP/2 on the serving port: chosen by ALPN, the same answers as HTTP/1.1, many requests and watches
on one connection, flow control both ways, a stream's end that is not the connection's."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hack.harness import ApiServer, free_port
from tests.conftest import Server, vc
from tests.support.h2client import H2Client

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"


def coll(ns: str) -> str:
    return f"{GV}/namespaces/{ns}/virtualclusters"


def curl(server: Server, version: str, path: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    crt, key = server.pki.cert("admin")
    out = subprocess.run(["curl", "-s", version, "--cacert", str(server.pki.ca), "--cert", str(crt), "--key", str(key),
                          "-w", "\n%{http_version}", server.url + path], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    body, _, used = out.rpartition("\n")
    return used, json.loads(body)


async def watchers(http: aiohttp.ClientSession) -> float:
    async with http.get("/metrics") as resp:
        text = await resp.text()
    lines = [x for x in text.splitlines() if x.startswith('apiserver_registered_watchers{resource="virtualclusters"')]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0  # the gauge shows once a watch has opened


async def test_a_client_offering_http2_gets_it_and_the_same_answer_as_over_http11(
        server: Server, http: aiohttp.ClientSession, namespace: str) -> None:
    async with http.post(coll(namespace), json=vc("alpn", namespace)) as resp:
        assert resp.status == 201
        uid = (await resp.json())["metadata"]["uid"]
    used2, over2 = curl(server, "--http2", f"{coll(namespace)}/alpn")
    used1, over1 = curl(server, "--http1.1", f"{coll(namespace)}/alpn")
    assert (used2, used1) == ("2", "1.1")
    assert over2["metadata"]["uid"] == over1["metadata"]["uid"] == uid  # its status may change in between
    for path in (GV, f"{coll(namespace)}/nothing"):  # discovery; a Status
        (used2, over2), (used1, over1) = curl(server, "--http2", path), curl(server, "--http1.1", path)
        assert (used2, used1) == ("2", "1.1") and over2 == over1
    assert (over2["kind"], over2["reason"], over2["code"]) == ("Status", "NotFound", 404)


def test_a_client_expecting_100_continue_gets_it_before_the_answer(
        server: Server, namespace: str, tmp_path: Path) -> None:
    body = tmp_path / "vc.json"
    body.write_text(json.dumps(vc("expecting", namespace)))
    crt, key = server.pki.cert("admin")
    out = subprocess.run(["curl", "-sv", "--http2", "--cacert", str(server.pki.ca), "--cert", str(crt), "--key", str(key),
                          "-H", "Expect: 100-continue", "-H", "Content-Type: application/json", "--data-binary",
                          f"@{body}", server.url + coll(namespace)], capture_output=True, text=True, timeout=30)
    assert "< HTTP/2 100" in out.stderr and "< HTTP/2 201" in out.stderr, out.stderr[-2000:]
    assert json.loads(out.stdout)["metadata"]["name"] == "expecting"


async def test_a_path_starting_with_two_slashes_is_a_path_as_over_http11(server: Server) -> None:
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        reply = await client.request("GET", f"//elsewhere{GV}/virtualclusters")
        used, over1 = curl(server, "--http1.1", f"//elsewhere{GV}/virtualclusters")
        assert (reply.status, reply.json()) == (over1["code"], over1) and over1["reason"] == "NotFound"
    finally:
        client.close()


async def test_many_requests_share_one_connection(server: Server, namespace: str) -> None:
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        created = await asyncio.gather(*(client.request("POST", coll(namespace), vc(f"m{i}", namespace))
                                         for i in range(60)))
        assert [r.status for r in created] == [201] * 60
        got = await asyncio.gather(*(client.request("GET", f"{coll(namespace)}/m{i}") for i in range(60)))
        assert [r.json()["metadata"]["name"] for r in got] == [f"m{i}" for i in range(60)]
        listed = await client.request("GET", coll(namespace))
        assert len(listed.json()["items"]) == 60
    finally:
        client.close()


async def test_a_body_larger_than_the_stream_window_arrives_whole_and_one_over_the_limit_is_refused(
        server: Server, namespace: str) -> None:
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        # Twice the 1 MiB stream window: decoded whole, then judged (annotations hold 256 KiB at most).
        big = vc("big", namespace, annotations={"x": "a" * (2 * 1024 * 1024)})
        judged = await client.request("POST", coll(namespace), big)
        assert (judged.status, judged.json()["reason"]) == (422, "Invalid")
        assert "metadata.annotations: Too long" in judged.json()["message"]
        huge = vc("huge", namespace, annotations={"x": "a" * (3 * 1024 * 1024 + 10)})
        refused = await client.request("POST", coll(namespace), huge)
        assert (refused.status, refused.json()["reason"]) == (413, "RequestEntityTooLarge")
        fits = vc("fits", namespace, annotations={"x": "a" * (200 * 1024)})
        created = await asyncio.gather(*(client.request("POST", coll(namespace), {**fits, "metadata": {
            **fits["metadata"], "name": f"fits-{i}"}}) for i in range(8)))  # 1.6 MB at once on the connection
        assert [r.status for r in created] == [201] * 8
        got = await client.request("GET", f"{coll(namespace)}/fits-7")
        assert got.json()["metadata"]["annotations"]["x"] == "a" * (200 * 1024)
    finally:
        client.close()


async def test_resetting_a_watch_stream_ends_that_watch_and_not_the_connections_others(
        server: Server, http: aiohttp.ClientSession, namespace: str) -> None:
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        before = await watchers(http)
        first, _ = await client.start("GET", f"{coll(namespace)}?watch=true")
        _, second = await client.start("GET", f"{coll(namespace)}?watch=true")
        for _ in range(100):
            if await watchers(http) == before + 2:
                break
            await asyncio.sleep(0.05)
        assert await watchers(http) == before + 2
        client.reset(first)
        for _ in range(100):
            if await watchers(http) == before + 1:
                break
            await asyncio.sleep(0.05)
        assert await watchers(http) == before + 1
        async with http.post(coll(namespace), json=vc("seen", namespace)) as resp:
            assert resp.status == 201
        await asyncio.wait_for(second.arrived.wait(), 10)
        event = json.loads(bytes(second.body).splitlines()[0])
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "seen")
    finally:
        client.close()


async def test_watches_sharing_a_connection_each_get_every_event_in_order(
        server: Server, http: aiohttp.ClientSession, namespace: str) -> None:
    """Events a stream can take at once are written from the dispatch, the others by the watch's task:
    either way, each watch sees every event once and in order."""
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        streams = [(await client.start("GET", f"{coll(namespace)}?watch=true"))[1] for _ in range(20)]
        await asyncio.sleep(0.5)
        names = [f"e{i:03d}" for i in range(100)]
        for chunk in range(0, 100, 25):
            await asyncio.gather(*(http.post(coll(namespace), json=vc(n, namespace)) for n in names[chunk:chunk + 25]))

        def lines(reply: Any) -> list[dict[str, Any]]:  # whole lines: a frame may end within one
            return [json.loads(line) for line in bytes(reply.body).split(b"\n")[:-1]]

        def seen(reply: Any) -> list[tuple[str, str]]:
            return [(e["type"], e["object"]["metadata"]["name"]) for e in lines(reply)]

        def added(reply: Any) -> list[str]:  # the reconciler's own writes come as MODIFIED events between
            return sorted(name for kind, name in seen(reply) if kind == "ADDED")

        for _ in range(200):
            if all(len(added(r)) >= 100 for r in streams):
                break
            await asyncio.sleep(0.05)
        assert all(added(r) == names for r in streams)
        rvs = [[int(e["object"]["metadata"]["resourceVersion"]) for e in lines(r)] for r in streams]
        shortest = min(len(r) for r in rvs)  # later MODIFIED events may still be arriving on some
        assert all(r == sorted(set(r)) for r in rvs) and all(r[:shortest] == rvs[0][:shortest] for r in rvs)
    finally:
        client.close()


async def test_changes_larger_than_a_frame_reach_every_watch_of_a_connection_whole_and_alike(
        server: Server, http: aiohttp.ClientSession, namespace: str) -> None:
    """An event over the 16 KiB frame size leaves in several DATA frames per stream, written from the
    dispatch; every watch gets each change once, whole, as the same bytes."""
    big = "x" * (40 << 10)
    async with http.post(coll(namespace), json=vc("big", namespace, annotations={"bulk": big})) as resp:
        assert resp.status == 201
    client = await H2Client.connect(server.url, server.ssl("admin"))
    client.open_windows(4 << 20, 1 << 30)  # as the aggregator does: every stream can take every event at once
    try:
        before = await watchers(http)
        streams = [(await client.start("GET", f"{coll(namespace)}?watch=true&fieldSelector=metadata.name%3Dbig"))[1]
                   for _ in range(5)]
        for _ in range(100):  # each watch waits for events before the first change is made
            if await watchers(http) >= before + 5:
                break
            await asyncio.sleep(0.05)
        rvs = []
        for i in range(3):
            async with http.patch(f"{coll(namespace)}/big", data=json.dumps({"metadata": {"labels": {"round": str(i)}}}),
                                  headers={"Content-Type": "application/merge-patch+json"}) as resp:
                assert resp.status == 200
                rvs.append((await resp.json())["metadata"]["resourceVersion"])

        def changes(reply: Any) -> list[bytes]:  # whole lines of these changes only (the reconciler writes too)
            return [line for line in bytes(reply.body).split(b"\n")[:-1]
                    if json.loads(line)["object"]["metadata"]["resourceVersion"] in rvs]

        for _ in range(200):
            if all(len(changes(r)) >= 3 for r in streams):
                break
            await asyncio.sleep(0.05)
        first = changes(streams[0])
        events = [json.loads(line) for line in first]
        assert [(e["type"], e["object"]["metadata"]["labels"]["round"]) for e in events] == \
            [("MODIFIED", "0"), ("MODIFIED", "1"), ("MODIFIED", "2")]
        assert all(e["object"]["metadata"]["annotations"]["bulk"] == big for e in events)
        assert all(changes(r) == first for r in streams[1:])
    finally:
        client.close()


async def test_a_malformed_request_path_resets_its_stream_only(server: Server, namespace: str) -> None:
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        _, bad = await client.start("GET", "relative/path")
        await asyncio.wait_for(bad.ended.wait(), 10)
        assert bad.reset_code == 1  # PROTOCOL_ERROR, as Go's servers answer a :path that is not absolute
        good = await client.request("GET", coll(namespace))
        assert good.status == 200 and good.json()["kind"] == "VirtualClusterList"
    finally:
        client.close()


def test_http2_can_be_switched_off(server: Server, tmp_path: Path) -> None:
    """``--enable-http2=false`` offers HTTP/1.1 alone (what to do should a client's HTTP/2 misbehave)."""
    api = ApiServer(server.pki, server.api.etcd_url, free_port(), tmp_path / "vc.log",
                    extra_args=["--enable-http2=false", "--enable-reconciler=false"]).start()
    try:
        off = Server(api, server.pki, server.kubeconfig, server.user_kubeconfig)
        used, body = curl(off, "--http2", f"{GV}/virtualclusters")
        assert used == "1.1" and body["kind"] == "VirtualClusterList"
    finally:
        api.stop()



async def test_a_header_list_over_the_limit_gets_431_and_the_connection_goes_on(
        server: Server, namespace: str) -> None:
    """A block that decodes past the header list size (one 4 KB field sent once and then named 300
    times by index: 1.2 MB from a few KB) is refused as Go's servers refuse it, and the next request
    on the same connection, whose block leans on the same HPACK table, is answered."""
    client = await H2Client.connect(server.url, server.ssl("admin"))
    try:
        _, reply = await client.start("GET", coll(namespace), headers=[("x-big", "v" * 4000)] * 300)
        await asyncio.wait_for(reply.ended.wait(), 30)
        assert reply.status == 431
        assert (await client.request("GET", coll(namespace))).status == 200
        assert client.goaway is None
    finally:
        client.close()

async def test_an_idle_connection_is_told_goaway_and_closed_and_a_busy_one_is_not(
        server: Server, namespace: str, tmp_path: Path) -> None:
    """``--idle-connection-timeout``: no stream open for that long, and the server ends the connection
    (GOAWAY with NO_ERROR, as Go's servers do); a connection carrying a watch stays open through it."""
    api = ApiServer(server.pki, server.api.etcd_url, free_port(), tmp_path / "vc.log",
                    extra_args=["--idle-connection-timeout=1", "--enable-reconciler=false"]).start()
    idle = busy = None
    try:
        short = Server(api, server.pki, server.kubeconfig, server.user_kubeconfig)
        idle = await H2Client.connect(short.url, server.ssl("admin"))
        busy = await H2Client.connect(short.url, server.ssl("admin"))
        _, watch = await busy.start("GET", f"{coll(namespace)}?watch=true&timeoutSeconds=4")
        await asyncio.sleep(0.5)
        assert (await idle.request("GET", coll(namespace))).status == 200  # its second starts again
        await asyncio.wait_for(idle.lost.wait(), 10)
        assert idle.goaway is not None and idle.goaway.error_code == 0
        await asyncio.sleep(0.5)
        assert busy.goaway is None and not watch.ended.is_set()  # 2 s since it opened: its watch holds it
        await asyncio.wait_for(watch.ended.wait(), 10)  # the watch ends at its timeout; then the connection idles
        await asyncio.wait_for(busy.lost.wait(), 10)
        assert busy.goaway is not None and busy.goaway.error_code == 0
    finally:
        for client in (idle, busy):
            if client is not None:
                client.close()
        api.stop()
