"""etcd faults survived: etcd crashed, frozen, restarted around a compaction, and filled up.

Every fault is real: etcd gets SIGKILL, SIGSTOP/SIGCONT and SIGTERM, and runs out of its space
quota. While etcd misbehaves, 16 clients keep writing and 50 watchers keep watching the way
client-go's reflector does, and two auditors keep listing (``tests/support/load.py``).

The truth they are held to is etcd's own history, read straight from etcd
(``tests/support/history.py``): every acknowledged write must be a commit in it and still
readable; every watcher session must have been shown exactly the changes of its objects, in
resourceVersion order, from its list up to the last resourceVersion it was told about (a 410 ends
a session, a silently missed event fails the test); every list must be the state at its
resourceVersion (``tests/support/faults.py``). While etcd is gone the server answers 503 Status,
promptly, and it recovers by itself.

``VC_SOAK=1`` (``make soak``) runs more rounds with longer outages.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from apiserver.apis.resource import FINALIZER
from hack.harness import ApiServer, Etcd, Pki, free_port
from tests.conftest import start_etcd, vc
from tests.support import SOAK
from tests.support.etcdadmin import EtcdAdmin
from tests.support.faults import ETCD_TIMEOUT, LEASE, ROUNDS, Isolated, no_tracebacks, say, survive
from tests.support.history import History
from tests.support.load import WATCHERS, Load, collection

pytestmark = pytest.mark.e2e

OUTAGE = 6.0 if SOAK else 3.0  # seconds etcd stays dead
FREEZE = 10.0  # seconds etcd stays SIGSTOPped
PEER_REVISIONS = 3000  # revisions a peer commits while the server is cut off: etcd sends them in 3 watch batches
PEER_NAMESPACE = "restart-peer"  # where the peer writes: only the cluster-wide watchers see it


@pytest.fixture
def isolated(tmp_path: Path, pki_files: Pki) -> Iterator[Isolated]:
    """An etcd and a vc-apiserver of their own; the test owns compaction (it reads etcd's history)."""
    etcd = start_etcd(tmp_path, "etcd")
    api = ApiServer(pki_files, etcd.url, free_port(), tmp_path / "vc-apiserver.log", extra_args=[
        "--etcd-request-timeout", str(ETCD_TIMEOUT), "--etcd-compaction-interval", "0",
        "--identity", "faults", "--leader-elect-lease-duration", str(LEASE)]).start()
    assert api.proc is not None and api.proc.pid is not None
    yield Isolated(etcd, api, api.proc.pid)
    if etcd.proc is not None:
        etcd.proc.signal(signal.SIGCONT)  # a frozen etcd would not act on SIGTERM
    api.stop()
    etcd.stop()


# -- 1. etcd crashes, freezes, restarts around a compaction ---------------------------------------

async def test_etcd_sigkill_under_load_answers_503_loses_nothing_and_recovers_by_itself(
        isolated: Isolated, pki_files: Pki) -> None:
    etcd = isolated.etcd

    async def crash(_: int, __: Load) -> float:
        assert etcd.proc is not None
        await asyncio.to_thread(etcd.proc.kill)
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(etcd.start)
        return time.monotonic()

    await survive(isolated, pki_files, "etcd SIGKILL", "kill", crash)


async def test_etcd_frozen_by_sigstop_answers_503_within_the_etcd_timeout_and_resumes_on_sigcont(
        isolated: Isolated, pki_files: Pki) -> None:
    etcd = isolated.etcd

    async def freeze(_: int, __: Load) -> float:
        assert etcd.proc is not None
        etcd.proc.signal(signal.SIGSTOP)
        await asyncio.sleep(FREEZE)
        etcd.proc.signal(signal.SIGCONT)
        return time.monotonic()

    verdict = await survive(isolated, pki_files, f"etcd SIGSTOP {FREEZE:.0f}s", "freeze", freeze)
    # A frozen etcd accepts connections and never answers: only the server's own timeout ends a request.
    assert verdict.slowest < 2 * ETCD_TIMEOUT + 1.5, f"an answer took {verdict.slowest:.1f}s"


async def test_etcd_restarted_with_a_compaction_in_between_watchers_relist_or_see_everything(
        isolated: Isolated, pki_files: Pki) -> None:
    """etcd stops (SIGTERM) and, before the server can reach it again, a peer writes and an operator compacts.

    Round kind "behind": the compaction only removes history the server has already seen, and the
    peer committed more revisions than etcd sends in one watch response, so the server resumes its
    watch and catches up in several batches. Round kind "past": the compaction removes the revision
    the server's watch resumes from, so its cache must relist and its watchers be told to (410).
    """
    etcd = isolated.etcd
    log = isolated.api.log
    history = History()
    compacted = 0

    def cache_relists() -> int:
        return log.read_text(errors="replace").count("fell behind compaction")

    async def restart(r: int, load: Load) -> float:
        nonlocal compacted
        past = r % 2 == 1
        await asyncio.to_thread(etcd.stop)  # SIGTERM: a clean, full stop
        stopped_at = time.monotonic()
        # The same member, reachable only on another client port: the server cannot see it.
        side = Etcd(etcd.data_dir, free_port(), etcd.peer_port, etcd.log)
        await asyncio.to_thread(side.start)
        admin = EtcdAdmin(side.url)
        seen = await admin.revision()
        peer = [vc(f"peer-{r}-{i}", PEER_NAMESPACE, annotations={"seq": str(seq)},
                   uid=f"00000000-0000-0000-{r:04d}-{i:012d}", creationTimestamp="2024-01-01T00:00:00Z",
                   generation=1, finalizers=[FINALIZER])
                for seq in range(PEER_REVISIONS // 20) for i in range(20)]
        await admin.put_objects(peer)
        await history.read(side.url)  # the truth, before the compaction takes it away
        compacted = await admin.revision() if past else max(seen - 50, compacted + 1)
        await admin.compact(compacted)
        await asyncio.to_thread(side.stop)
        await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - stopped_at)))
        await asyncio.to_thread(etcd.start)
        load.burst(PEER_NAMESPACE, 3.0)
        return time.monotonic()

    verdict = await survive(isolated, pki_files, "etcd full restart + compaction", "restart", restart, 2 * ROUNDS,
                            history)
    # Every "past" round made the watch cache relist, and each watcher was told (410) to relist too.
    assert cache_relists() >= ROUNDS, log.read_text()[-3000:]
    assert verdict.errors.get(410, 0) >= ROUNDS * WATCHERS, verdict.errors
    assert verdict.relists >= ROUNDS * WATCHERS, verdict


# -- 2. etcd runs out of space --------------------------------------------------------------------------

QUOTA = 4 * 1024 * 1024  # --quota-backend-bytes: a few dozen fat objects fill it
PAYLOAD = 48 * 1024


@pytest.fixture
def cramped(tmp_path: Path, pki_files: Pki) -> Iterator[tuple[Etcd, ApiServer]]:
    """An etcd with a tiny space quota, and a vc-apiserver whose reconciler stays out of the way."""
    etcd = start_etcd(tmp_path, "etcd", ["--quota-backend-bytes", str(QUOTA)])
    api = ApiServer(pki_files, etcd.url, free_port(), tmp_path / "vc-apiserver.log", extra_args=[
        "--etcd-request-timeout", str(ETCD_TIMEOUT), "--enable-reconciler", "false"]).start()
    yield etcd, api
    api.stop()
    etcd.stop()


async def test_etcd_out_of_space_refuses_writes_with_507_keeps_reads_and_corrupts_nothing(
        cramped: tuple[Etcd, ApiServer], pki_files: Pki) -> None:
    etcd, api = cramped
    admin = EtcdAdmin(etcd.url)
    namespace = "full"
    url = collection(namespace)
    rng = random.Random(7)
    stored: dict[str, dict[str, Any]] = {}  # what each acknowledged write answered
    async with aiohttp.ClientSession(base_url=api.url, connector=aiohttp.TCPConnector(
            ssl=pki_files.ssl_context("admin"))) as http:

        def payload() -> str:
            return rng.randbytes(PAYLOAD // 4 * 3).hex()[:PAYLOAD]

        def refused(status: int, body: dict[str, Any]) -> bool:
            return (status == 507 and body.get("kind") == "Status" and body.get("code") == 507
                    and body.get("reason") == "InsufficientStorage"
                    and "database space exceeded" in body.get("message", ""))

        # Fill etcd: every object is created, then rewritten (its first revision becomes garbage).
        refusal: tuple[int, dict[str, Any]] | None = None
        for i in range(10 * QUOTA // PAYLOAD):
            name = f"o{i}"
            async with http.post(url, json=vc(name, namespace, annotations={"payload": payload()})) as r:
                body = await r.json()
                if r.status != 201:
                    refusal = r.status, body
                    break
                stored[name] = body
            async with http.patch(f"{url}/{name}", json={"metadata": {"annotations": {"payload": payload()}}},
                                  headers={"Content-Type": "application/merge-patch+json"}) as r:
                body = await r.json()
                if r.status != 200:
                    refusal = r.status, body
                    break
                stored[name] = body
        assert refusal is not None, "etcd never ran out of space"
        assert refused(*refusal), refusal
        assert len(stored) > 10
        # etcd applies the one write that crosses the quota, then raises the alarm and answers
        # "database space exceeded" for it: that write may be stored although it was refused.
        async with http.get(f"{url}/{name}") as r:
            if r.status == 200:
                crossed = await r.json()
                assert crossed["metadata"]["annotations"]["payload"], crossed
                stored[name] = crossed

        # Every kind of write gets the same clear answer.
        some = sorted(stored)[0]
        labelled = {**stored[some], "metadata": {**stored[some]["metadata"], "labels": {"a": "b"}}}
        attempts: dict[str, Callable[[], Any]] = {
            "create": lambda: http.post(url, json=vc("small", namespace)),
            "merge patch": lambda: http.patch(f"{url}/{some}", json={"metadata": {"labels": {"a": "b"}}},
                                              headers={"Content-Type": "application/merge-patch+json"}),
            "update": lambda: http.put(f"{url}/{some}", json=labelled),
            "status": lambda: http.patch(f"{url}/{some}/status", json={"status": {"phase": "Pending"}},
                                         headers={"Content-Type": "application/merge-patch+json"}),
            "delete": lambda: http.delete(f"{url}/{some}"),  # sets deletionTimestamp: a write
        }
        for what, attempt in attempts.items():
            async with attempt() as r:
                body = await r.json()
                assert refused(r.status, body), (what, r.status, body)

        # Reads keep working and show exactly what was acknowledged: nothing half-written, nothing lost.
        async def everything_intact() -> None:
            for name, obj in stored.items():
                async with http.get(f"{url}/{name}") as r:
                    assert r.status == 200 and await r.json() == obj, name
            async with http.get(url) as r:
                assert r.status == 200
                assert {i["metadata"]["name"]: i for i in (await r.json())["items"]} == stored
            pages: dict[str, Any] = {}
            token = ""
            while True:
                async with http.get(url, params={"limit": "7", **({"continue": token} if token else {})}) as r:
                    assert r.status == 200, await r.text()
                    page = await r.json()
                pages.update({i["metadata"]["name"]: i for i in page["items"]})
                token = page["metadata"].get("continue", "")
                if not token:
                    break
            assert pages == stored
            async with http.get(url, params={"watch": "1", "resourceVersion": "0", "timeoutSeconds": "1"}) as r:
                events = [json.loads(line) for line in (await r.read()).splitlines() if line.strip()]
            assert {e["object"]["metadata"]["name"]: e["object"] for e in events if e["type"] == "ADDED"} == stored
        await everything_intact()
        async with http.get("/readyz") as r:
            assert r.status == 200

        # The operator frees space (compact, defragment, disarm): writes work again, no restart needed.
        await admin.compact(await admin.revision())
        await admin.call("/v3/maintenance/defragment", {})
        for alarm in (await admin.call("/v3/maintenance/alarm", {"action": "GET"})).get("alarms", []):
            await admin.call("/v3/maintenance/alarm", {"action": "DEACTIVATE", **alarm})
        async with http.post(url, json=vc("after", namespace)) as r:
            assert r.status == 201, await r.text()
            stored["after"] = await r.json()
        await everything_intact()
    no_tracebacks(api)
    say(f"etcd out of space ({QUOTA // 1024} KiB quota): {len(stored)} objects acknowledged before the refusal, "
        f"create/patch/update/status/delete all answered 507 InsufficientStorage naming 'database space "
        f"exceeded'; get, list, paged list and watch returned every object intact; writes resumed after "
        f"compact + defragment + disarm")
