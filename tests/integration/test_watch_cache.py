"""The watch cache and the delegator's use of it, against a real etcd (what every storage does is
test_storage_conformance.py's)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator

import pytest

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.machinery.selectors import parse_label_selector
from apiserver.storage.cacher import WatchCache
from apiserver.storage.compactor import Compactor
from apiserver.storage.delegator import CachedStore
from apiserver.storage.etcd3 import Store
from apiserver.storage.interface import ADDED, DELETED, MODIFIED, Entry, StorageError
from hack.harness import Etcd
from tests.conftest import start_etcd, vc


@pytest.fixture(scope="module")
def own_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = start_etcd(tmp_path_factory.mktemp("storage"), "etcd")
    yield server
    server.stop()


def cached_store(client: EtcdClient) -> CachedStore:
    store = Store(client, VIRTUALCLUSTERS)
    return CachedStore(store, WatchCache(client, store.layout))


@pytest.fixture
async def store(own_etcd: Etcd) -> AsyncIterator[CachedStore]:
    client = EtcdClient(EtcdConfig([own_etcd.url], request_timeout=2.0))
    await client.start()
    s = cached_store(client)
    s.cache.history_size = 50
    await s.cache.start()
    await asyncio.wait_for(s.cache.wait_ready(), 10)
    yield s
    await s.cache.stop()
    await client.close()


def obj(name: str, ns: str = "storage", **labels: str) -> dict:
    o = vc(name, ns)
    o["metadata"]["labels"] = labels
    return o


async def test_consistent_list_from_the_cache_sees_the_latest_write(store: CachedStore) -> None:
    await store.create(obj("fresh", ns="fresh-ns"))
    await store.cache.wait_consistent()
    names = [e.name for e in store.cache.sorted_entries("fresh-ns")]
    assert names == ["fresh"]


async def test_watch_resumes_from_a_revision_with_every_later_event(store: CachedStore) -> None:
    first = await store.create(obj("w1", ns="resume"))
    start = int(first["metadata"]["resourceVersion"])
    await store.create(obj("w2", ns="resume"))
    await store.delete("resume", "w1")
    await store.cache.wait_consistent()
    watcher, backlog = store.cache.watch_from(start, "resume", lambda e: True, bookmarks=False)
    watcher.stop()
    assert [(e.type, e.entry.name) for e in backlog] == [(ADDED, "w2"), (DELETED, "w1")]


async def test_watch_from_a_revision_older_than_the_history_is_expired(store: CachedStore) -> None:
    first = await store.create(obj("old-0", ns="expire"))
    for i in range(1, 60):  # history holds 50 events
        await store.create(obj(f"old-{i}", ns="expire"))
    await store.cache.wait_consistent()
    with pytest.raises(StorageError) as e:
        store.cache.watch_from(int(first["metadata"]["resourceVersion"]) - 1, None, lambda e: True, False)
    assert e.value.code == StorageError.EXPIRED


async def test_relabelled_object_leaves_a_filtered_watch_as_deleted(store: CachedStore) -> None:
    selector = parse_label_selector("team=a")
    await store.create(obj("moving", ns="filter", team="a"))
    await store.cache.wait_consistent()

    def predicate(entry: Entry) -> bool:
        return selector.matches(entry.labels)
    watcher, _ = store.cache.watch_from(store.cache.rv, "filter", predicate, bookmarks=False)

    async def move(o: dict) -> dict:
        o["metadata"]["labels"] = {"team": "b"}
        return o

    async def back(o: dict) -> dict:
        o["metadata"]["labels"] = {"team": "a"}
        return o
    await store.guaranteed_update("filter", "moving", move)
    await store.guaranteed_update("filter", "moving", back)
    seen = [await asyncio.wait_for(watcher.queue.get(), 5) for _ in range(2)]
    watcher.stop()
    assert [e.type for e in seen] == [DELETED, ADDED]
    gone = seen[0].entry
    assert gone is not None
    # As kube sends it: the state the watcher last saw (still team=a), under the revision that moved it.
    assert gone.obj["metadata"]["labels"] == {"team": "a"}
    assert gone.rv == seen[0].rv and gone.obj["metadata"]["resourceVersion"] == str(seen[0].rv)


async def test_cached_objects_give_the_cycle_collector_nothing_to_walk(store: CachedStore) -> None:
    """A full collection walks every container the process holds; the cache's objects are not among
    them, however many there are (each entry holds its encoding, its labels and scalars)."""
    await store.create(obj("walked", ns="gcns", tier="db", team="a"))
    await store.cache.wait_consistent()
    [entry] = store.cache.sorted_entries("gcns")
    gc.collect()
    assert [type(r).__name__ for r in gc.get_referents(entry) if gc.is_tracked(r) and r is not Entry] == []
    assert entry.obj["metadata"]["labels"] == {"tier": "db", "team": "a"} == entry.labels
    entry.obj["metadata"]["labels"]["tier"] = "changed"
    assert entry.obj["metadata"]["labels"]["tier"] == "db", "each access decodes a private copy"


async def test_modified_events_carry_the_new_state(store: CachedStore) -> None:
    await store.create(obj("mod", ns="modns"))
    await store.cache.wait_consistent()
    watcher, _ = store.cache.watch_from(store.cache.rv, "modns", lambda e: True, bookmarks=False)

    async def label(o: dict) -> dict:
        o["metadata"]["labels"] = {"v": "2"}
        return o
    _, new = await store.guaranteed_update("modns", "mod", label)
    event = await asyncio.wait_for(watcher.queue.get(), 5)
    watcher.stop()
    assert event.type == MODIFIED
    assert event.entry.obj["metadata"]["labels"] == {"v": "2"}
    assert event.entry.obj["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]


async def test_paged_read_at_a_compacted_revision_is_gone(store: CachedStore) -> None:
    created = await store.create(obj("compact-me", ns="compact"))
    rv = int(created["metadata"]["resourceVersion"])
    await store.create(obj("compact-me-2", ns="compact"))
    compactor = Compactor(store.store.etcd, 0)
    head = await compactor.compact_once(0)
    await compactor.compact_once(head)
    with pytest.raises(StorageError) as e:
        await store.store.list_snapshot("compact", rv, None, 10)
    assert e.value.code == StorageError.EXPIRED


async def test_a_later_page_from_the_cache_equals_etcd_at_the_first_pages_revision(store: CachedStore) -> None:
    ns = "pages"
    for i in range(0, 40, 2):
        await store.create(obj(f"p{i:02d}", ns))
    first_rv = await store.cache.wait_consistent()

    async def relabel(o: dict) -> dict:
        o["metadata"]["labels"] = {"changed": "yes"}
        return o
    for i in range(0, 40, 8):  # changed, deleted, created between and after: all after the first page
        await store.guaranteed_update(ns, f"p{i:02d}", relabel)
        await store.delete(ns, f"p{i + 2:02d}")
        await store.create(obj(f"p{i + 1:02d}", ns))
    await store.create(obj("z-last", ns))
    await store.cache.wait_consistent()

    def shape(entries: list[Entry]) -> list[tuple[str, int, dict]]:
        return [(e.key, e.rv, e.obj) for e in entries]

    for after in ("", store.layout.key(ns, "p05"), store.layout.key(ns, "p16"), store.layout.key(ns, "p38")):
        snapshot = store.cache.entries_at(first_rv, ns, after)
        assert snapshot is not None
        from_etcd, _, _ = await store.store.list_snapshot(ns, first_rv, after or None, 0)
        assert shape(list(snapshot)) == shape(from_etcd)
        assert shape(list(store.cache.entries_at(store.cache.rv, ns, after) or [])) == \
            shape((await store.store.list_snapshot(ns, store.cache.rv, after or None, 0))[0])


async def test_a_page_older_than_the_cache_history_is_not_served_from_the_cache(store: CachedStore) -> None:
    await store.create(obj("old-page", "history"))
    rv = await store.cache.wait_consistent()
    for i in range(store.cache.history_size + 5):
        await store.create(obj(f"h{i}", "history"))
    await store.cache.wait_consistent()
    assert store.cache.entries_at(rv, "history", "") is None


async def test_the_label_index_finds_exactly_what_a_scan_finds_as_labels_change(store: CachedStore) -> None:
    ns = "indexed"
    for i in range(30):
        await store.create(obj(f"l{i:02d}", ns, shard=str(i % 3), tier="a" if i < 15 else "b"))

    async def move(o: dict) -> dict:
        o["metadata"]["labels"]["shard"] = "9"
        return o
    for i in range(0, 30, 4):
        await store.guaranteed_update(ns, f"l{i:02d}", move)
    for i in range(1, 30, 5):
        await store.delete(ns, f"l{i:02d}")
    await store.cache.wait_consistent()
    for selector in ("shard=1", "shard in (0,9)", "shard=9,tier=a", "shard=7"):
        wanted = parse_label_selector(selector)
        pinned = wanted.indexable()
        assert pinned is not None
        found = [e.key for e in store.cache.entries_labelled(ns, pinned.key, pinned.values) if wanted.matches(e.labels)]
        scanned = [e.key for e in store.cache.sorted_entries(ns) if wanted.matches(e.labels)]
        assert found == scanned
        assert found or selector == "shard=7"
    assert parse_label_selector("shard!=1").indexable() is None


async def test_consistent_reads_under_load_share_revision_reads_and_see_every_acknowledged_write(
        own_etcd: Etcd) -> None:
    reads: list[str] = []
    client = EtcdClient(EtcdConfig([own_etcd.url]), observe=lambda op, _s, _ok: reads.append(op))
    await client.start()
    s = cached_store(client)
    await s.cache.start()
    try:
        await asyncio.wait_for(s.cache.wait_ready(), 10)
        acknowledged = 0
        stop = asyncio.Event()

        async def writer() -> None:
            nonlocal acknowledged
            i = 0
            while not stop.is_set():
                acknowledged = await client.put(f"/registry/kosmos.io/unrelated/{i % 5}", b"x")
                i += 1

        async def reader() -> list[tuple[int, int]]:
            seen = []
            for _ in range(50):
                before = acknowledged  # a write acknowledged before this read began
                seen.append((before, await s.cache.wait_consistent()))
            return seen

        writing = asyncio.create_task(writer())
        reads.clear()
        results = await asyncio.gather(*(reader() for _ in range(16)))
        stop.set()
        await writing
        pairs = [p for r in results for p in r]
        assert all(revision >= before for before, revision in pairs)  # linearizable: never behind an ack
        # 16 readers of 50 reads each: 50 revision reads would be perfect sharing; back-to-back
        # reads without spacing split the readers into two alternating groups (~100).
        assert reads.count("range") <= len(pairs) / 10
    finally:
        await s.cache.stop()
        await client.close()
