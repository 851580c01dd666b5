"""The watch cache: one etcd watch feeds an in-memory copy that serves list and watch.

The cache watches the whole ``/registry/`` prefix (everything this server writes), so
its revision tracks etcd's current revision and a consistent list only has to wait
until the cache has caught up with the revision etcd reports. Events are kept in a
bounded history so clients can resume a watch from a recent resourceVersion; older
ones get 410 Expired, as from kube-apiserver.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import InitVar, dataclass, field

from apiserver.etcd.client import EtcdClient, EtcdCompacted, EtcdError, EtcdUnavailable, prefix_end
from apiserver.etcd.messages import Event as EtcdEvent
from apiserver.storage.codec import decode_entry, from_etcd, with_rv
from apiserver.storage.interface import (
    ADDED,
    BOOKMARK,
    DELETED,
    MODIFIED,
    Entry,
    Event,
    Predicate,
    StorageError,
    match_all,
)
from apiserver.storage.keys import ROOT, KeyLayout

__all__ = ["EventQueue", "WatchCache", "Watcher"]

log = logging.getLogger(__name__)


def _last_state(entry: Entry, rv: int) -> Entry:
    """An object's last state under the revision that took it away: what a DELETED event carries."""
    return Entry.of(entry.key, entry.namespace, entry.name, rv, with_rv(entry.obj, rv))


class _Turned:
    """An event as the watchers whose filter turns its type see it, made once for all of them: the
    dispatch hands one event to each watcher in turn, and a DELETED for an object that left a
    selector carries a copy of its last state. Holds the event being dispatched, so its id is not reused."""

    __slots__ = ("event", "turned")

    def __init__(self) -> None:
        self.event: Event | None = None
        self.turned: dict[str, Event] = {}

    def __call__(self, event: Event, seen: str) -> Event:
        if event is not self.event:
            self.event, self.turned = event, {}
        turned = self.turned.get(seen)
        if turned is None:
            if seen == DELETED:
                # As kube's watch cache: an object that no longer matches leaves as the state the
                # watcher last saw of it, under the revision of the change that took it out.
                assert event.prev is not None  # it matched before: there was a state before
                turned = Event(DELETED, event.rv, _last_state(event.prev, event.rv), event.prev)
            else:
                turned = Event(seen, event.rv, event.entry, event.prev)
            self.turned[seen] = turned
        return turned


_turned = _Turned()


class EventQueue:
    """The events one watcher has yet to take, for its one reader.

    asyncio.Queue's interface, without what no watcher uses (task_done, waiting writers): every
    event passes through one of these per watcher, 200 times over for an event that 200 watchers
    see. A full queue refuses an event rather than raising (its reader fell behind).
    """

    __slots__ = ("_items", "_waiter", "sink", "capacity")

    def __init__(self, capacity: int = sys.maxsize) -> None:
        self._items: deque[Event | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        # What a reader waiting on an empty queue takes events with, at once: the event is then
        # handled without waking the reader (True), or queued as any other (False).
        self.sink: Callable[[Event], bool] | None = None
        self.capacity = capacity  # events that may wait; the end of the stream (None) always goes in

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: Event | None) -> bool:
        """Hand ``item`` to the waiting reader's sink or queue it; False: ``capacity`` events wait already,
        and it was not taken."""
        items = self._items
        if items:
            if item is not None and len(items) >= self.capacity:
                return False
        elif item is not None and self.sink is not None and (waiter := self._waiter) is not None \
                and not waiter.done() and self.sink(item):
            return True
        items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    def get_nowait(self) -> Event | None:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> Event | None:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._items.popleft()


@dataclass(eq=False)
class Watcher:
    """A client's watch: filtered events queued in order, bounded so a slow reader is cut off."""

    namespace: str | None
    predicate: Predicate
    bookmarks: bool
    capacity: InitVar[int]  # events that may wait for the client: held by its queue
    queue: EventQueue = field(init=False)
    closed_reason: str = ""
    next_bookmark: float = 0.0
    after_rv: int = 0  # events at or below this revision are not this watcher's (a watch from a future one)
    on_stop: Callable[[Watcher], None] | None = field(default=None, repr=False)

    def __post_init__(self, capacity: int) -> None:
        self.queue = EventQueue(capacity)
        self._unfiltered = self.predicate is match_all  # no selector: the namespace alone decides

    def _matches(self, entry: Entry | None) -> bool:
        if entry is None:
            return False
        if self.namespace is not None and entry.namespace != self.namespace:
            return False
        return self.predicate(entry)

    def translate(self, event: Event) -> Event | None:
        """What this watcher sees of an event, with kube's filter transitions."""
        if event.type == BOOKMARK:
            return event
        # What the dispatch mostly meets: a change to an object this watcher sees, seen as is. Both states
        # are of one etcd key, so the previous state is in the namespace of the new one.
        if self._unfiltered and event.type == MODIFIED and event.prev is not None and event.entry is not None \
                and (self.namespace is None or event.entry.namespace == self.namespace):
            return event
        now = event.type != DELETED and self._matches(event.entry)
        before = self._matches(event.prev) if event.type != DELETED else self._matches(event.entry)
        if event.type == DELETED:
            return event if before else None
        seen = (MODIFIED if before else ADDED) if now else (DELETED if before else None)
        if seen is None:
            return None
        return event if seen == event.type else _turned(event, seen)

    def offer(self, event: Event) -> None:
        if self.closed_reason or (event.type != BOOKMARK and event.rv <= self.after_rv):
            return
        seen = self.translate(event)
        if seen is not None and not self.queue.put_nowait(seen):
            self.close("the watcher fell too far behind")

    def close(self, reason: str) -> None:
        if not self.closed_reason:
            self.closed_reason = reason
            self.queue.put_nowait(None)

    def stop(self) -> None:
        """The client is gone: nothing more is offered to this watcher."""
        self.closed_reason = self.closed_reason or "stopped"
        if self.on_stop is not None:
            self.on_stop(self)


class WatchCache:
    """In-memory state of one resource, kept current by a single etcd watch."""

    def __init__(self, etcd: EtcdClient, layout: KeyLayout, *, history_size: int = 10_000,
                 watcher_capacity: int = 1_000, bookmark_interval: float = 60.0,
                 freshness_timeout: float = 3.0, revision_read_spacing: float = 0.001) -> None:
        self.etcd = etcd
        self.layout = layout
        self.history_size = history_size
        self.watcher_capacity = watcher_capacity
        self.bookmark_interval = bookmark_interval
        self.freshness_timeout = freshness_timeout
        self.revision_read_spacing = revision_read_spacing
        self.rv = 0
        self._items: dict[str, Entry] = {}
        self._by_label: dict[str, dict[str, set[str]]] = {}  # label key → value → keys: selector lookups
        self._sorted: list[str] | None = None
        self._history: deque[Event] = deque()
        self._history_start = 0  # every event with rv > this is in history
        self._watchers: set[Watcher] = set()
        self._scoped: dict[str | None, set[Watcher]] = {}  # the same watchers by namespace (None: all)
        self._advanced = asyncio.Condition()
        self._next_revision: asyncio.Future[int] | None = None  # the revision read that callers wait for
        self._reading_revision = False
        self._ready = asyncio.Event()
        self._connected = False
        self._task: asyncio.Task[None] | None = None
        self._bookmark_task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watchcache:{self.layout.resource}")
        self._bookmark_task = asyncio.create_task(self._bookmarks(), name="watchcache:bookmarks")

    async def stop(self) -> None:
        for task in (self._task, self._bookmark_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for watcher in list(self._watchers):
            watcher.close("the server is shutting down")
        self._forget_watchers()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def connected(self) -> bool:
        return self._connected

    async def wait_ready(self) -> None:
        await self._ready.wait()

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)

    def __len__(self) -> int:
        return len(self._items)

    async def _run(self) -> None:
        backoff = 0.1
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                async for resp in self.etcd.watch(ROOT, prefix_end(ROOT), start_revision=self.rv + 1):
                    self._connected = True
                    backoff = 0.1
                    if resp.canceled:
                        if resp.compact_revision:
                            raise EtcdCompacted(resp.cancel_reason or "watch compacted", resp.compact_revision)
                        raise EtcdUnavailable(f"etcd canceled the watch: {resp.cancel_reason}")
                    if resp.created:
                        continue  # its header revision may be ahead of events still to come
                    # etcd stamps each batch of a catch-up (1000 revisions at most) with its current
                    # revision: the cache is only as current as the last event it has applied.
                    # Event-less responses are progress notifications, sent once caught up.
                    revision = resp.events[-1].kv.mod_revision if resp.events else resp.header.revision
                    await self._apply(revision, resp.events)
                raise EtcdUnavailable("etcd closed the watch stream")
            except asyncio.CancelledError:
                raise
            except EtcdCompacted as e:
                log.warning("watch cache fell behind compaction (%s); relisting", e)
                need_list = True
            except EtcdError as e:
                log.warning("etcd watch interrupted: %s; retrying in %.1fs", e, backoff)
            except Exception:  # keep the cache alive whatever goes wrong; the log has the cause
                log.exception("watch cache loop failed; retrying")
                need_list = True
            self._connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def _relist(self) -> None:
        """Replace the cache from a fresh etcd list; watchers cannot bridge the gap and are closed."""
        result = await self.etcd.range(self.layout.prefix, prefix_end(self.layout.prefix))
        items: dict[str, Entry] = {}
        for kv in result.kvs:
            entry = decode_entry(self.layout, kv)
            if entry is not None:
                items[entry.key] = entry
        had_state = self._ready.is_set()
        self._items = items
        self._by_label = {}
        for entry in items.values():
            self._index(entry)
        self._sorted = None
        self._history.clear()
        self._history_start = result.header.revision
        if had_state:
            for watcher in list(self._watchers):
                watcher.close("the watch cache was re-initialized")
            self._forget_watchers()
        await self._advance(result.header.revision)
        self._connected = True
        self._ready.set()
        log.info("watch cache for %s listed %d objects at revision %d",
                 self.layout.resource, len(items), result.header.revision)

    async def _apply(self, revision: int, events: Iterable[EtcdEvent]) -> None:
        for ev in events:
            if not self.layout.owns(ev.kv.key):
                continue
            rv = ev.kv.mod_revision
            key = ev.kv.key.decode()
            prev = self._items.get(key)
            if ev.type == EtcdEvent.DELETE:
                if prev is None:
                    continue
                gone = _last_state(prev, rv)
                del self._items[key]
                self._unindex(prev)
                self._sorted = None
                self._publish(Event(DELETED, rv, gone, prev))
            else:
                entry = decode_entry(self.layout, ev.kv)
                if entry is None:
                    continue
                self._items[key] = entry
                if prev is not None:
                    self._unindex(prev)
                self._index(entry)
                if prev is None:
                    self._sorted = None
                self._publish(Event(MODIFIED if prev else ADDED, rv, entry, prev))
        if revision > self.rv:
            await self._advance(revision)

    async def _advance(self, revision: int) -> None:
        """Stand at ``revision`` with the items just applied, then wake whoever waits for it.

        The revision moves before the first await (taking the condition's lock can yield):
        a list must never see items newer than the resourceVersion it is given.
        """
        self.rv = revision
        async with self._advanced:
            self._advanced.notify_all()

    def _publish(self, event: Event) -> None:
        self._history.append(event)
        while len(self._history) > self.history_size:
            dropped = self._history.popleft()
            self._history_start = dropped.rv
        entry = event.entry or event.prev
        namespace = entry.namespace if entry is not None else None
        # Only the watchers that can see this object: its namespace's and the cluster-wide ones.
        for scope in (namespace, None) if namespace is not None else (None,):
            for watcher in list(self._scoped.get(scope, ())):
                watcher.offer(event)
                if watcher.closed_reason:
                    self._drop_watcher(watcher)

    async def _bookmarks(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for watcher in list(self._watchers):
                if watcher.bookmarks and now >= watcher.next_bookmark:
                    watcher.next_bookmark = now + self.bookmark_interval
                    watcher.offer(Event(BOOKMARK, self.rv, None))

    # -- reads -----------------------------------------------------------------------

    async def wait_fresh(self, rv: int) -> None:
        """Wait until the cache has seen revision ``rv``; 504 like kube when it does not in time."""
        if self.rv >= rv:
            return
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(lambda: self.rv >= rv), self.freshness_timeout)
            except TimeoutError:
                if self.rv >= rv:  # reached as time ran out (the loop was busy applying a batch)
                    return
                raise StorageError(StorageError.FUTURE_REVISION, f"Too large resource version: {rv}",
                                   revision=rv, current=self.rv) from None

    async def wait_consistent(self) -> int:
        """Wait until the cache holds everything etcd has committed; returns that revision.

        Only etcd knows its current revision: when it cannot say, the read fails as a write
        would (503 while etcd is unreachable), never as an internal error.
        """
        try:
            current = await self.current_revision()
        except EtcdError as e:
            raise from_etcd(e) from e
        await self.wait_fresh(current)
        return current

    async def current_revision(self) -> int:
        """etcd's current revision, as read by a request sent after this call began.

        Concurrent callers share one read: whoever arrives while a read is in flight waits for
        the next one (the one in flight may predate a write this caller already saw acknowledged).
        Under sustained load the next read starts ``revision_read_spacing`` after the last one
        answered, so that more callers share it: a quorum read costs etcd about 0.4 ms of CPU,
        as much as serving the GET it guards. A caller that finds no read
        going is never delayed.
        """
        if self._next_revision is None:
            self._next_revision = asyncio.get_running_loop().create_future()
            if not self._reading_revision:
                self._reading_revision = True
                asyncio.get_running_loop().create_task(self._read_revisions())
        return await asyncio.shield(self._next_revision)

    async def _read_revisions(self) -> None:
        try:
            back_to_back = False
            while self._next_revision is not None:
                if back_to_back and self.revision_read_spacing:
                    await asyncio.sleep(self.revision_read_spacing)  # callers keep arriving meanwhile
                back_to_back = True
                batch, self._next_revision = self._next_revision, None
                try:
                    revision = await self.etcd.current_revision(self.layout.prefix)
                except Exception as e:  # handed to every waiter of this batch
                    batch.set_exception(e)
                    batch.exception()  # retrieved here too: nobody may be left waiting
                else:
                    batch.set_result(revision)
        finally:
            self._reading_revision = False

    def sorted_entries(self, namespace: str | None = None, after_key: str | None = None) -> Iterable[Entry]:
        """Entries in key order, optionally within one namespace and strictly after a key."""
        if self._sorted is None:
            self._sorted = sorted(self._items)
        keys = self._sorted
        prefix = self.layout.namespace_prefix(namespace)
        start = bisect.bisect_left(keys, prefix)
        if after_key is not None and after_key >= prefix:
            start = bisect.bisect_right(keys, after_key)
        items = self._items
        for i in range(start, len(keys)):
            key = keys[i]
            if not key.startswith(prefix):
                break
            entry = items.get(key)
            if entry is not None:
                yield entry

    def _index(self, entry: Entry) -> None:
        for label, value in entry.labels.items():
            self._by_label.setdefault(label, {}).setdefault(value, set()).add(entry.key)

    def _unindex(self, entry: Entry) -> None:
        for label, value in entry.labels.items():
            values = self._by_label.get(label)
            keys = values.get(value) if values is not None else None
            if values is None or keys is None:
                continue
            keys.discard(entry.key)
            if not keys:
                del values[value]
                if not values:
                    del self._by_label[label]

    def entries_labelled(self, namespace: str | None, label: str, values: Iterable[str]) -> list[Entry]:
        """Entries in key order whose ``label`` has one of ``values``: a selector's candidates
        from the label index instead of a scan of every object."""
        index = self._by_label.get(label) or {}
        keys: set[str] = set()
        for value in values:
            keys |= index.get(value, set())
        prefix = self.layout.namespace_prefix(namespace)
        items = self._items
        return [items[k] for k in sorted(keys) if k.startswith(prefix)]

    def entries_at(self, rv: int, namespace: str | None, after_key: str) -> Iterator[Entry] | None:
        """Entries in key order strictly after ``after_key`` as they were at revision ``rv``, for the
        next page of a paginated list; None when the history no longer reaches back to ``rv``.

        The state at ``rv`` is today's with every later change undone: each key changed since
        takes the state before its oldest change after ``rv`` (absent if that change created it).
        """
        if rv > self.rv or rv < self._history_start:
            return None
        before: dict[str, Entry | None] = {}
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.entry is not None:
                before[event.entry.key] = event.prev
        current = self.sorted_entries(namespace, after_key)
        if not before:
            return iter(current)
        prefix = self.layout.namespace_prefix(namespace)
        changed = sorted(k for k in before if k.startswith(prefix) and k > after_key)
        return _undo(current, changed, before)

    def get(self, namespace: str, name: str) -> Entry | None:
        return self._items.get(self.layout.key(namespace, name))

    # -- watch -----------------------------------------------------------------------

    def watch_from(self, rv: int, namespace: str | None, predicate: Predicate,
                   bookmarks: bool) -> tuple[Watcher, list[Event]]:
        """Register a watcher resuming after ``rv`` (which may be ahead of the cache); the returned
        backlog comes first."""
        if rv < self._history_start:
            raise StorageError(StorageError.EXPIRED, f"too old resource version: {rv} ({self._history_start})")
        watcher = self._new_watcher(namespace, predicate, bookmarks)
        watcher.after_rv = rv  # a revision not reached yet: its events, and nothing before, come when they do
        backlog: list[Event] = []
        index = bisect.bisect_right([e.rv for e in self._history], rv) if self._history else 0
        for i in range(index, len(self._history)):
            seen = watcher.translate(self._history[i])
            if seen is not None:
                backlog.append(seen)
        return watcher, backlog

    def watch_with_state(self, namespace: str | None, predicate: Predicate,
                         bookmarks: bool) -> tuple[Watcher, list[Event], int]:
        """Register a watcher that first gets ADDED for every matching object now cached."""
        watcher = self._new_watcher(namespace, predicate, bookmarks)
        backlog = [Event(ADDED, e.rv, e) for e in self.sorted_entries(namespace) if predicate(e)]
        return watcher, backlog, self.rv

    def _new_watcher(self, namespace: str | None, predicate: Predicate, bookmarks: bool) -> Watcher:
        watcher = Watcher(namespace, predicate, bookmarks, self.watcher_capacity, on_stop=self._drop_watcher)
        watcher.next_bookmark = time.monotonic() + self.bookmark_interval
        self._watchers.add(watcher)
        self._scoped.setdefault(namespace, set()).add(watcher)
        return watcher

    def _drop_watcher(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)
        scoped = self._scoped.get(watcher.namespace)
        if scoped is not None:
            scoped.discard(watcher)
            if not scoped:
                del self._scoped[watcher.namespace]

    def _forget_watchers(self) -> None:
        self._watchers.clear()
        self._scoped.clear()


def _undo(current: Iterable[Entry], changed: list[str], before: dict[str, Entry | None]) -> Iterator[Entry]:
    """Merge today's entries (key order) with the earlier states of the ``changed`` keys (sorted)."""
    pending = iter(changed)
    nxt = next(pending, None)
    for entry in current:
        while nxt is not None and nxt < entry.key:  # there then, gone now
            if (earlier := before[nxt]) is not None:
                yield earlier
            nxt = next(pending, None)
        if nxt == entry.key:  # changed since (or created since: then absent)
            if (earlier := before[nxt]) is not None:
                yield earlier
            nxt = next(pending, None)
        else:
            yield entry
    while nxt is not None:
        if (earlier := before[nxt]) is not None:
            yield earlier
        nxt = next(pending, None)
