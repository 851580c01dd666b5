"""SIGTERM ends vc-apiserver as kube-apiserver ends: /readyz fails at once while everything is still
served for --shutdown-delay-duration, then the listener closes, every watch ends as a finished
response (its client re-watches elsewhere), and the process exits well within a pod's default
termination grace period of 30 s."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from hack.harness import ApiServer, Pki, free_port
from tests.conftest import start_etcd, vc
from tests.support.h2client import H2Client

DELAY = 5.0
NS = "shutdown"
COLLECTION = f"/apis/kosmos.io/v1alpha1/namespaces/{NS}/virtualclusters"


@pytest.fixture
def stopping(tmp_path: Path, pki_files: Pki) -> Iterator[ApiServer]:
    """A server on an etcd of its own: no other server (nor its reconciler) touches its objects."""
    etcd = start_etcd(tmp_path, "etcd")
    api = ApiServer(pki_files, etcd.url, free_port(), tmp_path / "vc-apiserver.log",
                    extra_args=["--enable-reconciler", "false", "--shutdown-delay-duration", str(DELAY)]).start()
    yield api
    api.stop()
    etcd.stop()


async def _readyz(http: aiohttp.ClientSession) -> tuple[int, str]:
    async with http.get("/readyz?verbose") as r:
        return r.status, await r.text()


async def test_sigterm_fails_readyz_serves_through_the_delay_then_ends_watches_and_exits(
        stopping: ApiServer, pki_files: Pki) -> None:
    assert stopping.proc is not None and stopping.proc.popen is not None
    async with aiohttp.ClientSession(base_url=stopping.url, connector=aiohttp.TCPConnector(
            ssl=pki_files.ssl_context("admin"))) as http:
        async with http.post(COLLECTION, json=vc("before", NS)) as r:
            assert r.status == 201
        watch = await http.get(COLLECTION + "?watch=true&resourceVersion=0")
        first = json.loads(await asyncio.wait_for(watch.content.readline(), 10))
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "before")
        assert (await _readyz(http))[0] == 200

        stopping.proc.signal(signal.SIGTERM)
        signalled = time.monotonic()
        status, text = await _readyz(http)
        while status == 200 and time.monotonic() - signalled < DELAY / 2:  # the signal is handled on its own time
            await asyncio.sleep(0.05)
            status, text = await _readyz(http)
        assert status == 500 and "[-]shutdown failed: reason withheld" in text and "[+]ping ok" in text
        async with http.get("/livez") as r:
            assert r.status == 200  # not dead: a liveness probe must not kill it meanwhile
        async with http.post(COLLECTION, json=vc("during", NS)) as r:
            assert r.status == 201  # still served during the delay
        assert time.monotonic() - signalled < DELAY, "the delay was over before the checks ran"

        rest = await asyncio.wait_for(watch.content.read(), 30)  # read() raises if the stream is cut
        events = [json.loads(line) for line in rest.splitlines() if line]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "during")]
        assert time.monotonic() - signalled >= DELAY  # not before the delay was over

    code = await asyncio.to_thread(stopping.proc.popen.wait, 30)
    assert code == 0


async def test_sigterm_sends_http2_clients_goaway_and_finishes_their_open_watches(
        stopping: ApiServer, pki_files: Pki) -> None:
    """Over HTTP/2 (the aggregator's transport) the same: streams in flight are answered through the
    delay, then GOAWAY (NO_ERROR, naming the last stream taken), every watch stream ends with END_STREAM
    rather than a reset, and the connection closes."""
    assert stopping.proc is not None and stopping.proc.popen is not None
    client = await H2Client.connect(stopping.url, pki_files.ssl_context("admin"))
    try:
        watch_id, watch = await client.start("GET", COLLECTION + "?watch=true")
        stopping.proc.signal(signal.SIGTERM)
        signalled = time.monotonic()
        created = await client.request("POST", COLLECTION, vc("during-h2", NS))
        assert created.status == 201  # still served during the delay
        await asyncio.wait_for(watch.ended.wait(), 30)
        assert time.monotonic() - signalled >= DELAY
        assert watch.reset_code is None and watch.status == 200  # a finished response, not a broken one
        events = [json.loads(line) for line in bytes(watch.body).splitlines() if line]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "during-h2")]
        await asyncio.wait_for(client.lost.wait(), 30)
        assert client.goaway is not None and client.goaway.error_code == 0
        assert client.goaway.last_stream_id >= watch_id
    finally:
        client.close()
    code = await asyncio.to_thread(stopping.proc.popen.wait, 30)
    assert code == 0
