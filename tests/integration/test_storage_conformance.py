"""The storage interface's contract, run against both implementations over a real etcd: the etcd
store itself and the cached delegator the registry is given (as k8s.io/apiserver's
``storage/testing`` runs one suite against every ``storage.Interface``)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.machinery.selectors import parse_label_selector
from apiserver.storage.cacher import WatchCache
from apiserver.storage.delegator import CachedStore
from apiserver.storage.etcd3 import Store
from apiserver.storage.interface import ListOptions, Storage, StorageError
from hack.harness import Etcd
from tests.conftest import start_etcd, vc

_namespaces = itertools.count()


@pytest.fixture(scope="module")
def own_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = start_etcd(tmp_path_factory.mktemp("conformance"), "etcd")
    yield server
    server.stop()


@pytest.fixture(params=["etcd", "cached"])
async def storage(request: pytest.FixtureRequest, own_etcd: Etcd) -> AsyncIterator[Storage]:
    client = EtcdClient(EtcdConfig([own_etcd.url], request_timeout=2.0))
    await client.start()
    store = Store(client, VIRTUALCLUSTERS)
    cache = None
    if request.param == "cached":
        cache = WatchCache(client, store.layout)
        await cache.start()
        await asyncio.wait_for(cache.wait_ready(), 10)
    yield CachedStore(store, cache) if cache is not None else store
    if cache is not None:
        await cache.stop()
    await client.close()


@pytest.fixture
def ns() -> str:
    """A namespace of its own for each test, so both implementations start from nothing."""
    return f"conf-{next(_namespaces)}"


def obj(name: str, ns: str, **labels: str) -> dict:
    o = vc(name, ns)
    o["metadata"]["labels"] = labels
    return o


async def relabel(o: dict) -> dict:
    o["metadata"]["labels"] = {"relabelled": "yes"}
    return o


async def test_a_created_object_reads_back_with_its_etcd_revision(storage: Storage, ns: str) -> None:
    created = await storage.create(obj("a", ns))
    got = await storage.get(ns, "a")
    assert got.rv == int(created["metadata"]["resourceVersion"]) > 0
    assert got.obj["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert got.obj["spec"] == created["spec"]


async def test_a_missing_object_is_not_found(storage: Storage, ns: str) -> None:
    with pytest.raises(StorageError) as e:
        await storage.get(ns, "nothing")
    assert e.value.code == StorageError.NOT_FOUND


async def test_a_second_create_of_a_name_is_exists_and_keeps_the_first(storage: Storage, ns: str) -> None:
    await storage.create(obj("dup", ns, first="yes"))
    with pytest.raises(StorageError) as e:
        await storage.create(obj("dup", ns, first="no"))
    assert e.value.code == StorageError.EXISTS
    assert (await storage.get(ns, "dup")).labels == {"first": "yes"}


async def test_an_update_at_a_stale_resource_version_is_a_conflict_and_changes_nothing(
        storage: Storage, ns: str) -> None:
    created = await storage.create(obj("stale", ns))
    _, current = await storage.guaranteed_update(ns, "stale", relabel)
    with pytest.raises(StorageError) as e:
        await storage.guaranteed_update(ns, "stale", relabel, expected_rv=created["metadata"]["resourceVersion"])
    assert e.value.code == StorageError.CONFLICT
    assert (await storage.get(ns, "stale")).rv == int(current["metadata"]["resourceVersion"])


async def test_concurrent_read_modify_writes_lose_no_update(storage: Storage, ns: str) -> None:
    await storage.create(obj("counter", ns))

    async def bump(o: dict) -> dict:
        n = int(o["metadata"].get("annotations", {}).get("n", "0"))
        o["metadata"]["annotations"] = {"n": str(n + 1)}
        return o
    await asyncio.gather(*(storage.guaranteed_update(ns, "counter", bump) for _ in range(12)))
    assert (await storage.get(ns, "counter")).obj["metadata"]["annotations"]["n"] == "12"


async def test_an_update_that_changes_nothing_keeps_the_resource_version(storage: Storage, ns: str) -> None:
    created = await storage.create(obj("same", ns))

    async def unchanged(o: dict) -> dict:
        return o
    old, new = await storage.guaranteed_update(ns, "same", unchanged)
    assert new["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert (await storage.get(ns, "same")).rv == int(created["metadata"]["resourceVersion"])


async def test_what_an_update_function_raises_reaches_the_caller_and_nothing_is_stored(
        storage: Storage, ns: str) -> None:
    created = await storage.create(obj("refused", ns))

    async def refuse(o: dict) -> dict:
        raise ValueError("not this one")
    with pytest.raises(ValueError, match="not this one"):
        await storage.guaranteed_update(ns, "refused", refuse)
    assert (await storage.get(ns, "refused")).rv == int(created["metadata"]["resourceVersion"])


async def test_an_update_removing_the_last_finalizer_of_a_deleted_object_removes_it(
        storage: Storage, ns: str) -> None:
    o = obj("final", ns)
    o["metadata"]["finalizers"] = ["kosmos.io/test"]
    o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await storage.create(o)

    async def release(current: dict) -> dict:
        current["metadata"]["finalizers"] = []
        return current
    await storage.guaranteed_update(ns, "final", release)
    with pytest.raises(StorageError) as e:
        await storage.get(ns, "final")
    assert e.value.code == StorageError.NOT_FOUND


async def test_delete_returns_the_last_state_and_a_refused_precondition_keeps_the_object(
        storage: Storage, ns: str) -> None:
    await storage.create(obj("gone", ns, keep="no"))
    await storage.create(obj("kept", ns, keep="yes"))

    def only_unkept(o: dict) -> None:
        if o["metadata"]["labels"].get("keep") == "yes":
            raise PermissionError("kept")
    last = await storage.delete(ns, "gone", only_unkept)
    assert last["metadata"]["name"] == "gone"
    with pytest.raises(PermissionError):
        await storage.delete(ns, "kept", only_unkept)
    assert (await storage.get(ns, "kept")).name == "kept"
    with pytest.raises(StorageError) as e:
        await storage.delete(ns, "gone")
    assert e.value.code == StorageError.NOT_FOUND


async def test_a_list_is_in_key_order_and_filtered_by_labels(storage: Storage, ns: str) -> None:
    for name, team in (("c", "a"), ("a", "b"), ("b", "a")):
        await storage.create(obj(name, ns, team=team))
    everything = await storage.list(ns, ListOptions())
    assert [e.name for e in everything.entries] == ["a", "b", "c"]
    team_a = await storage.list(ns, ListOptions(label_selector=parse_label_selector("team=a")))
    assert [e.name for e in team_a.entries] == ["b", "c"]
    assert everything.resource_version >= max(e.rv for e in everything.entries)


async def test_pages_joined_by_continue_tokens_are_the_list_at_the_first_pages_revision(
        storage: Storage, ns: str) -> None:
    for i in range(7):
        await storage.create(obj(f"p{i}", ns))
    first = await storage.list(ns, ListOptions(limit=3))
    await storage.create(obj("p3a", ns))  # after the first page: not in this list
    await storage.delete(ns, "p5")  # deleted after the first page: still in it
    names = [e.name for e in first.entries]
    token = first.continue_token
    while token:
        page = await storage.list(ns, ListOptions(limit=3, continue_token=token))
        assert page.resource_version == first.resource_version
        names += [e.name for e in page.entries]
        token = page.continue_token
    assert names == [f"p{i}" for i in range(7)]


async def test_an_exact_list_reads_the_past_revision(storage: Storage, ns: str) -> None:
    await storage.create(obj("then", ns))
    then = (await storage.list(ns, ListOptions())).resource_version
    await storage.create(obj("later", ns))
    past = await storage.list(ns, ListOptions(resource_version=str(then), resource_version_match="Exact"))
    assert [e.name for e in past.entries] == ["then"]
    assert past.resource_version == then


async def test_a_forged_continue_token_is_invalid(storage: Storage, ns: str) -> None:
    with pytest.raises(StorageError) as e:
        await storage.list(ns, ListOptions(continue_token="bm90IGEgdG9rZW4"))
    assert e.value.code == StorageError.INVALID


async def test_an_etcd_outage_is_a_quick_unavailable_and_storage_recovers(storage: Storage, own_etcd: Etcd,
                                                                          ns: str) -> None:
    own_etcd.stop()
    try:
        started = time.monotonic()
        with pytest.raises(StorageError) as e:
            await storage.get(ns, "anything")
        assert e.value.code == StorageError.UNAVAILABLE
        with pytest.raises(StorageError) as e:
            await storage.create(obj("during-outage", ns))
        assert e.value.code == StorageError.UNAVAILABLE
        assert time.monotonic() - started < 6
    finally:
        own_etcd.start()
    for _ in range(100):  # the client reconnects on its own
        try:
            await storage.create(obj("after-outage", ns))
            break
        except StorageError:
            await asyncio.sleep(0.1)
    assert (await storage.get(ns, "after-outage")).name == "after-outage"
