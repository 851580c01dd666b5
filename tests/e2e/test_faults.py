"""Faults survived: etcd crashed, frozen, restarted around a compaction and filled up; a leader killed.

Every fault is real: etcd gets SIGKILL, SIGSTOP/SIGCONT and SIGTERM, a vc-apiserver
replica gets SIGKILL, etcd runs out of its space quota. While etcd misbehaves, 16
clients keep writing and 50 watchers keep watching the way client-go's reflector does
(list, watch from the list's resourceVersion, resume from the last resourceVersion
seen, relist after a 410 or an ERROR event), and two auditors keep listing.

The truth they are held to is etcd's own history, read straight from etcd: every
acknowledged write must be a commit in it and still readable; every watcher session
must have been shown exactly the changes of its objects, in resourceVersion order,
from its list up to the last resourceVersion it was told about (a 410 ends a session,
a silently missed event fails the test); every list must be the state at its
resourceVersion. While etcd is gone the server answers 503 Status, promptly, and it
recovers by itself.

``VC_SOAK=1`` (``make soak``) runs more rounds with longer outages.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import json
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from apiserver.apis.resource import FINALIZER
from hack.harness import ApiServer, Etcd, Pki, free_port
from tests.conftest import start_etcd, vc

pytestmark = pytest.mark.e2e

SOAK = os.environ.get("VC_SOAK", "") not in ("", "0")
ROUNDS = 4 if SOAK else 1  # faults per test (the full restart does two kinds per round)
OUTAGE = 6.0 if SOAK else 3.0  # seconds etcd stays dead
FREEZE = 10.0  # seconds etcd stays SIGSTOPped
WARM = 4.0 if SOAK else 1.5  # seconds of normal traffic before each fault and after the last
WRITERS, WATCHERS, CLUSTER_WATCHERS, AUDITORS, NAMESPACES = 16, 50, 4, 2, 8
PACE = 0.1  # seconds between a writer's requests
ETCD_TIMEOUT = 2  # --etcd-request-timeout: how long the server waits on etcd before answering 503
CLIENT_TIMEOUT = 10.0  # no answer may take longer than this
LEASE = 3  # --leader-elect-lease-duration
PEER_REVISIONS = 3000  # revisions a peer commits while the server is cut off: etcd sends them in 3 watch batches
PEER_NAMESPACE = "restart-peer"  # where the peer writes: only the cluster-wide watchers see it
GROUP_PATH = "/apis/kosmos.io/v1alpha1"
VC_PREFIX = "/registry/kosmos.io/virtualclusters/"
LEADER_KEY = "/registry/kosmos.io/leases/reconciler"
WRITES = ("create", "patch", "delete")


_config: pytest.Config | None = None


@pytest.fixture(autouse=True)
def _measurements_reach_the_terminal(request: pytest.FixtureRequest) -> None:
    """The measured numbers are printed even when pytest captures output (as ``make test`` does)."""
    global _config
    _config = request.config


def say(line: str) -> None:
    reporter = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    capture = _config.pluginmanager.get_plugin("capturemanager") if _config else None
    if reporter is None or capture is None:
        print(f"[faults] {line}", flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"[faults] {line}")


def collection(namespace: str | None) -> str:
    return f"{GROUP_PATH}/namespaces/{namespace}/virtualclusters" if namespace else f"{GROUP_PATH}/virtualclusters"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited documents of a stream, however long (etcd batches 1000 events a line)."""
    buffer = b""
    async for chunk in content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line


# -- etcd, spoken to directly: the truth and the operator's tools ---------------------------

class EtcdAdmin:
    """What an operator (or another replica) does to etcd behind the server's back."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.post(self.url + path, json=body,
                                                        timeout=aiohttp.ClientTimeout(total=60)) as r:
            data = await r.json(content_type=None)
            assert r.status == 200 and "error" not in data, (path, r.status, data)
            return data

    async def revision(self) -> int:
        return int((await self.call("/v3/kv/range", {"key": b64("/"), "count_only": True}))["header"]["revision"])

    async def get(self, key: str) -> str | None:
        kvs = (await self.call("/v3/kv/range", {"key": b64(key)})).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    async def compact(self, revision: int) -> None:
        await self.call("/v3/kv/compaction", {"revision": str(revision), "physical": True})

    async def put_objects(self, objects: list[dict[str, Any]]) -> None:
        """Store objects, in order per key, as a server stores them (resourceVersion is etcd's, never stored)."""
        by_key: dict[str, list[dict[str, Any]]] = {}
        for obj in objects:
            meta = obj["metadata"]
            by_key.setdefault(f"{VC_PREFIX}{meta['namespace']}/{meta['name']}", []).append(obj)
        async with aiohttp.ClientSession() as s:
            async def put(key: str, versions: list[dict[str, Any]]) -> None:
                for obj in versions:
                    async with s.post(self.url + "/v3/kv/put", json={
                            "key": b64(key), "value": base64.b64encode(orjson.dumps(obj)).decode()}) as r:
                        assert r.status == 200, await r.text()
            await asyncio.gather(*(put(k, v) for k, v in by_key.items()))


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED or DELETED: what a watcher of the object must be shown
    namespace: str
    name: str


class History:
    """etcd's own record of every change to a VirtualCluster, read with a historical etcd watch."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.revs: list[int] = []
        self.puts: set[tuple[str, str, int]] = set()
        self.next = 1  # the first revision not read yet

    async def read(self, url: str) -> None:
        """Everything committed since the last read (before a compaction destroys it)."""
        end = await EtcdAdmin(url).revision()
        if end < self.next:
            return
        body = {"create_request": {"key": b64("\0"), "range_end": b64("\0"), "start_revision": str(self.next)}}
        async with aiohttp.ClientSession() as s, s.post(url + "/v3/watch", json=body,
                                                        timeout=aiohttp.ClientTimeout(total=60)) as r:
            last = self.next - 1
            async for line in lines(r.content):
                result = orjson.loads(line)["result"]
                assert not result.get("canceled"), f"the history was compacted before it was read: {result}"
                for ev in result.get("events", []):
                    kv = ev["kv"]
                    last = rev = int(kv["mod_revision"])
                    key = base64.b64decode(kv["key"]).decode()
                    if rev > end or not key.startswith(VC_PREFIX):
                        continue
                    namespace, name = key[len(VC_PREFIX):].split("/", 1)
                    if ev.get("type") == "DELETE":
                        kind = "DELETED"
                    else:
                        kind = "ADDED" if kv.get("create_revision") == kv.get("mod_revision") else "MODIFIED"
                        self.puts.add((namespace, name, rev))
                    self.changes.append(Change(rev, kind, namespace, name))
                    self.revs.append(rev)
                if last >= end:
                    break
        self.next = end + 1

    def between(self, after: int, upto: int, namespace: str | None) -> list[Change]:
        """Changes with after < rv <= upto, as a watcher of ``namespace`` (None: all) must see them."""
        lo, hi = bisect.bisect_right(self.revs, after), bisect.bisect_right(self.revs, upto)
        return [c for c in self.changes[lo:hi] if namespace is None or c.namespace == namespace]

    def states(self, revisions: set[int]) -> dict[int, dict[tuple[str, str], int]]:
        """The objects (key → resourceVersion) at each of ``revisions``, replayed once."""
        out: dict[int, dict[tuple[str, str], int]] = {}
        state: dict[tuple[str, str], int] = {}
        i = 0
        for rev in sorted(revisions):
            while i < len(self.changes) and self.changes[i].rv <= rev:
                c = self.changes[i]
                if c.type == "DELETED":
                    state.pop((c.namespace, c.name), None)
                else:
                    state[(c.namespace, c.name)] = c.rv
                i += 1
            out[rev] = dict(state)
        return out


def scoped(state: dict[tuple[str, str], int], namespace: str | None) -> dict[tuple[str, str], int]:
    return {k: v for k, v in state.items() if namespace is None or k[0] == namespace}


def difference(expected: dict[tuple[str, str], int], got: dict[tuple[str, str], int]) -> str:
    missing = sorted(set(expected) - set(got))[:3]
    extra = sorted(set(got) - set(expected))[:3]
    stale = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])[:3]
    return (f"missing {missing}, unexpected {extra}, "
            f"wrong resourceVersion {[(k, got[k], expected[k]) for k in stale]}")


# -- the clients ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Answer:
    what: str
    status: int
    body: Any
    started: float
    finished: float

    @property
    def is_status(self) -> bool:
        body = self.body
        return isinstance(body, dict) and body.get("kind") == "Status" and body.get("code") == self.status


@dataclass
class Written:
    """One object a writer created, and what it was told about it."""

    namespace: str
    name: str
    seq: int  # the last acknowledged value of the "seq" annotation
    rv: int  # the resourceVersion that acknowledgement carried
    attempted: int = 0  # the last value sent, acknowledged or not
    deleting: bool = False
    delete_acked: bool = False


@dataclass
class Session:
    """A watcher's view from one list: the state listed, then every event shown after it."""

    list_rv: int
    listed: dict[tuple[str, str], int]
    events: list[Change] = field(default_factory=list)
    horizon: int = 0  # everything up to here has been shown (the last event or bookmark)
    ended: str = ""  # the ERROR event that ended it

    def __post_init__(self) -> None:
        self.horizon = self.list_rv


@dataclass
class Watcher:
    namespace: str | None
    sessions: list[Session] = field(default_factory=list)
    disorder: list[str] = field(default_factory=list)


class Load:
    """16 writers, 50 watchers and 2 auditors against one vc-apiserver, recording every answer."""

    def __init__(self, api: ApiServer, pki: Pki, tag: str) -> None:
        self.api = api
        self.pki = pki
        self.namespaces = [f"{tag}-{i}" for i in range(NAMESPACES)]
        self.answers: list[Answer] = []
        self.hung: list[str] = []  # requests the client gave up on: the server never answered
        self.transport: list[str] = []  # connections that broke
        self.objects: list[Written] = []
        self.watchers = [Watcher(None) for _ in range(CLUSTER_WATCHERS)] + [
            Watcher(self.namespaces[i % NAMESPACES]) for i in range(WATCHERS - CLUSTER_WATCHERS)]
        self.audits: list[tuple[str, int, dict[tuple[str, str], int]]] = []
        self.stop_writing = asyncio.Event()
        self._writers: list[asyncio.Task[None]] = []
        self._readers: list[asyncio.Task[None]] = []
        self.http: aiohttp.ClientSession

    async def __aenter__(self) -> Load:
        self.http = aiohttp.ClientSession(base_url=self.api.url, connector=aiohttp.TCPConnector(
            ssl=self.pki.ssl_context("admin"), limit=0))
        self._readers = [asyncio.create_task(self._watch(w)) for w in self.watchers]
        self._readers += [asyncio.create_task(self._audit(a)) for a in range(AUDITORS)]
        await self._until(lambda: all(w.sessions for w in self.watchers), 30, "every watcher listed")
        self._writers = [asyncio.create_task(self._write(w)) for w in range(WRITERS)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._writers + self._readers:
            task.cancel()
        await asyncio.gather(*self._writers, *self._readers, return_exceptions=True)
        await self.http.close()

    @staticmethod
    async def _until(check: Callable[[], bool], timeout: float, what: str) -> float:
        started = time.monotonic()
        while not check():
            if time.monotonic() - started > timeout:
                raise AssertionError(f"{what}: not within {timeout:.0f}s")
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    async def request(self, what: str, method: str, path: str, body: Any = None,
                      content_type: str = "application/json") -> Answer | None:
        started = time.monotonic()
        data = None if body is None else orjson.dumps(body)
        try:
            async with self.http.request(method, path, data=data, headers={"Content-Type": content_type},
                                         timeout=aiohttp.ClientTimeout(total=CLIENT_TIMEOUT)) as r:
                raw = await r.read()
                try:
                    parsed: Any = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    parsed = raw[:300]
                answer = Answer(what, r.status, parsed, started, time.monotonic())
        except TimeoutError:
            self.hung.append(f"{method} {path} after {time.monotonic() - started:.1f}s")
            return None
        except aiohttp.ClientError as e:
            self.transport.append(f"{method} {path}: {type(e).__name__}: {e}")
            await asyncio.sleep(0.2)
            return None
        self.answers.append(answer)
        return answer

    # writers: create, patch a counter annotation, delete; each object belongs to one writer

    async def _write(self, w: int) -> None:
        namespace = self.namespaces[w % NAMESPACES]
        rng = random.Random(w)
        mine: list[Written] = []
        i = 0
        while not self.stop_writing.is_set():
            i += 1
            live = [o for o in mine if not o.deleting]
            if not live or i % 3 == 1:
                name = f"w{w}-{i}"
                a = await self.request("create", "POST", collection(namespace),
                                       vc(name, namespace, annotations={"seq": "0"}))
                if a is not None and a.status == 201:
                    obj = Written(namespace, name, 0, int(a.body["metadata"]["resourceVersion"]))
                    mine.append(obj)
                    self.objects.append(obj)
            elif i % 5 == 0:
                victim = live[0]
                victim.deleting = True
                a = await self.request("delete", "DELETE", f"{collection(namespace)}/{victim.name}")
                victim.delete_acked = a is not None and a.status == 200
            else:
                target = rng.choice(live)
                target.attempted += 1
                seq = target.attempted
                a = await self.request("patch", "PATCH", f"{collection(namespace)}/{target.name}",
                                       {"metadata": {"annotations": {"seq": str(seq)}}},
                                       "application/merge-patch+json")
                if a is not None and a.status == 200:
                    target.seq, target.rv = seq, int(a.body["metadata"]["resourceVersion"])
            await asyncio.sleep(PACE)

    # watchers: list, then watch from the list's resourceVersion, resuming; relist on ERROR

    async def _list(self, what: str, namespace: str | None) -> tuple[int, dict[tuple[str, str], int]]:
        while True:
            a = await self.request(what, "GET", collection(namespace))
            if a is not None and a.status == 200:
                items = {(i["metadata"]["namespace"], i["metadata"]["name"]): int(i["metadata"]["resourceVersion"])
                         for i in a.body["items"]}
                return int(a.body["metadata"]["resourceVersion"]), items
            await asyncio.sleep(0.2)

    async def _watch(self, watcher: Watcher) -> None:
        rng = random.Random(id(watcher))
        while True:
            session = Session(*await self._list("list", watcher.namespace))
            watcher.sessions.append(session)
            rv = session.list_rv
            while not session.ended:
                params = {"watch": "1", "resourceVersion": str(rv), "allowWatchBookmarks": "true",
                          "timeoutSeconds": str(rng.randint(2, 6))}
                started = time.monotonic()
                try:
                    async with self.http.get(collection(watcher.namespace), params=params,
                                             timeout=aiohttp.ClientTimeout(total=None, sock_connect=CLIENT_TIMEOUT,
                                                                           sock_read=CLIENT_TIMEOUT)) as r:
                        if r.status != 200:
                            self.answers.append(Answer("watch", r.status, await r.json(content_type=None),
                                                       started, time.monotonic()))
                            await asyncio.sleep(0.2)
                            continue
                        self.answers.append(Answer("watch", 200, None, started, time.monotonic()))
                        async for line in lines(r.content):
                            event = orjson.loads(line)
                            obj, kind = event["object"], event["type"]
                            if kind == "ERROR":
                                self.answers.append(Answer("watch-error", int(obj.get("code", 0)), obj,
                                                           started, time.monotonic()))
                                session.ended = f"ERROR {obj.get('code')} {obj.get('reason')}"
                                break
                            event_rv = int(obj["metadata"]["resourceVersion"])
                            if kind == "BOOKMARK":
                                rv = session.horizon = max(rv, event_rv)
                                continue
                            meta = obj["metadata"]
                            if event_rv <= rv:
                                watcher.disorder.append(f"{kind} {meta['namespace']}/{meta['name']} at {event_rv} "
                                                        f"after {rv}")
                            session.events.append(Change(event_rv, kind, meta["namespace"], meta["name"]))
                            rv = session.horizon = max(rv, event_rv)
                except TimeoutError:
                    self.hung.append(f"watch {collection(watcher.namespace)} from {rv}: no data for "
                                     f"{CLIENT_TIMEOUT:.0f}s")
                except aiohttp.ClientError as e:
                    self.transport.append(f"watch: {type(e).__name__}: {e}")
                    await asyncio.sleep(0.2)

    def burst(self, namespace: str, seconds: float, parallel: int = 8) -> None:
        """Clients that relist the moment the server answers again: every list is audited too."""
        async def lister() -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                rv, items = await self._list("audit", namespace)
                self.audits.append((namespace, rv, items))
        self._readers += [asyncio.create_task(lister()) for _ in range(parallel)]

    async def _audit(self, a: int) -> None:
        """Lists, all the time: each must be exactly etcd's state at its resourceVersion."""
        for n in range(1_000_000):
            namespace = self.namespaces[(n * AUDITORS + a) % NAMESPACES]
            rv, items = await self._list("audit", namespace)
            self.audits.append((namespace, rv, items))
            await asyncio.sleep(0.02)

    async def read_back(self, objects: list[Written]) -> list[Answer | None]:
        """GET each object, a few at a time (the server's inflight limit is not what is tested here)."""
        sem = asyncio.Semaphore(16)

        async def get(o: Written) -> Answer | None:
            async with sem:
                return await self.request("get", "GET", f"{collection(o.namespace)}/{o.name}")
        return list(await asyncio.gather(*(get(o) for o in objects)))

    # measurements

    async def recovered(self, since: float, timeout: float = 30.0) -> float:
        """Seconds from ``since`` until a write was acknowledged again."""
        def first() -> float | None:
            done = [a.finished for a in self.answers
                    if a.what in WRITES and a.status < 300 and a.finished > since]
            return min(done) - since if done else None
        await self._until(lambda: first() is not None, timeout, "a write acknowledged after the fault")
        value = first()
        assert value is not None
        return value

    def errors_between(self, start: float, end: float) -> list[Answer]:
        return [a for a in self.answers if a.status >= 300 and start <= a.finished <= end]

    # afterwards

    async def settle(self, etcd_url: str, history: History) -> None:
        """Writers stopped, deletions finished, every watcher caught up with etcd; readers stopped."""
        self.stop_writing.set()
        await asyncio.gather(*self._writers)
        pending = [o for o in self.objects if o.delete_acked]
        started = time.monotonic()
        while pending:  # the reconciler releases the finalizer of each
            answers = await self.read_back(pending)
            pending = [o for o, a in zip(pending, answers, strict=True) if a is None or a.status != 404]
            assert not pending or time.monotonic() - started < 30, \
                f"acknowledged deletions never completed: {[f'{o.namespace}/{o.name}' for o in pending[:5]]}"
            await asyncio.sleep(0.5 if pending else 0)
        await history.read(etcd_url)
        targets = {id(w): max([c.rv for c in history.between(0, history.next - 1, w.namespace)] or [0])
                   for w in self.watchers}
        try:
            await self._until(lambda: all(w.sessions[-1].horizon >= targets[id(w)] for w in self.watchers), 30,
                              "every watcher shown every change")
        except AssertionError:
            behind = [(w.namespace, w.sessions[-1].horizon, targets[id(w)]) for w in self.watchers
                      if w.sessions[-1].horizon < targets[id(w)]]
            raise AssertionError(f"watchers never caught up with etcd (namespace, shown up to, latest): "
                                 f"{behind[:5]}") from None
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        await history.read(etcd_url)


# -- what every fault must leave behind --------------------------------------------------------

@dataclass
class Verdict:
    writes_acked: int
    objects_read_back: int
    events_checked: int
    sessions: int
    relists: int
    lists_checked: int
    errors: dict[int, int]
    slowest: float


async def verify(load: Load, history: History) -> Verdict:
    problems: list[str] = []
    answers = load.answers

    # Every failure is a Status: 503 while etcd is gone (checked per fault), 410 to a watcher that must
    # relist, 404 when asking after a deletion; and, as from kube-apiserver, 504 ResourceVersionTooLarge
    # to a watch from a resourceVersion the cache has not reached in 3 s (clients retry it).
    errors: dict[int, int] = {}
    for a in answers:
        if a.status < 300:
            continue
        errors[a.status] = errors.get(a.status, 0) + 1
        if not a.is_status:
            problems.append(f"{a.what} answered {a.status} without a Status body: {a.body!r:.300}")
        elif not (a.status == 503 or (a.status == 404 and a.what == "get")
                  or (a.status == 410 and a.what == "watch-error") or (a.status == 504 and a.what == "watch"
                  and [c.get("reason") for c in a.body.get("details", {}).get("causes", [])]
                  == ["ResourceVersionTooLarge"])):
            problems.append(f"{a.what} answered {a.status}: {a.body.get('message')!r:.300}")
    assert not load.hung, f"requests the server never answered: {load.hung[:5]}"
    assert not load.transport, f"connections that broke: {load.transport[:5]}"
    slowest = max(a.finished - a.started for a in answers)
    assert slowest < CLIENT_TIMEOUT

    # Every acknowledged write is a commit in etcd's history, and still readable.
    acked = [(a.body["metadata"]["namespace"], a.body["metadata"]["name"], int(a.body["metadata"]["resourceVersion"]))
             for a in answers if a.what in ("create", "patch") and a.status < 300]
    lost = [w for w in acked if w not in history.puts]
    if lost:
        problems.append(f"{len(lost)} acknowledged writes are not commits in etcd's history: {lost[:5]}")
    gets = await load.read_back(load.objects)
    for o, a in zip(load.objects, gets, strict=True):
        if a is None:
            problems.append(f"{o.namespace}/{o.name}: no answer")
        elif o.deleting and a.status == 404:
            continue
        elif o.delete_acked:
            problems.append(f"{o.namespace}/{o.name}: deletion acknowledged, still there ({a.status})")
        elif a.status != 200:
            problems.append(f"{o.namespace}/{o.name}: acknowledged at {o.rv}, now {a.status}")
        else:
            meta = a.body["metadata"]
            if int(meta["annotations"]["seq"]) < o.seq or int(meta["resourceVersion"]) < o.rv:
                problems.append(f"{o.namespace}/{o.name}: acknowledged seq {o.seq} at {o.rv}, reads back "
                                f"seq {meta['annotations']['seq']} at {meta['resourceVersion']}")

    # Every list is etcd's state at its resourceVersion; every watcher session was shown exactly
    # the changes of its objects after its list, in order, up to where it got.
    states = history.states({s.list_rv for w in load.watchers for s in w.sessions} |
                            {rv for _, rv, _ in load.audits})
    for namespace, rv, items in load.audits:
        if items != scoped(states[rv], namespace):
            problems.append(f"list of {namespace} at {rv} is not etcd's state then: "
                            f"{difference(scoped(states[rv], namespace), items)}")
    events = 0
    for n, w in enumerate(load.watchers):
        who = f"watcher {n} ({w.namespace or 'all namespaces'})"
        problems += [f"{who} was shown events out of order: {d}" for d in w.disorder[:3]]
        for s in w.sessions:
            if s.listed != scoped(states[s.list_rv], w.namespace):
                problems.append(f"{who} listed at {s.list_rv}: {difference(scoped(states[s.list_rv], w.namespace), s.listed)}")
            expected = history.between(s.list_rv, s.horizon, w.namespace)
            events += len(s.events)
            if s.events != expected:
                i = next((i for i, (e, g) in enumerate(zip(expected, s.events, strict=False)) if e != g),
                         min(len(expected), len(s.events)))
                problems.append(
                    f"{who}, session listed at {s.list_rv} and shown up to {s.horizon}: event {i} should be "
                    f"{expected[i] if i < len(expected) else 'nothing'}, was "
                    f"{s.events[i] if i < len(s.events) else 'nothing'} "
                    f"({len(expected)} changes in etcd, {len(s.events)} shown)")
    assert not problems, "\n".join(problems[:25])
    return Verdict(writes_acked=len(acked), objects_read_back=len(load.objects), events_checked=events,
                   sessions=sum(len(w.sessions) for w in load.watchers),
                   relists=sum(1 for w in load.watchers for s in w.sessions if s.ended),
                   lists_checked=len(load.audits) + sum(len(w.sessions) for w in load.watchers),
                   errors=errors, slowest=slowest)


def no_tracebacks(api: ApiServer) -> None:
    assert api.proc is not None
    log = api.proc.log.read_text(errors="replace")
    assert "Traceback" not in log, "the server logged a traceback:\n" + log[log.index("Traceback") - 300:][:3000]


# -- fixtures ----------------------------------------------------------------------------------

@dataclass
class Isolated:
    etcd: Etcd
    api: ApiServer
    pid: int


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


async def survive(env: Isolated, pki: Pki, name: str, tag: str, fault: Callable[[int, Load], Awaitable[float]],
                  rounds: int = ROUNDS, history: History | None = None) -> Verdict:
    """Run ``fault`` (which returns when etcd is back) ``rounds`` times under load, then check everything."""
    history = history or History()
    recoveries: list[float] = []
    first_503: list[float] = []
    async with Load(env.api, pki, tag) as load:
        for r in range(rounds):
            await asyncio.sleep(WARM)
            began = time.monotonic()
            back = await fault(r, load)
            assert env.api.proc is not None and env.api.proc.alive(), "vc-apiserver died"
            recoveries.append(await load.recovered(back))
            during = load.errors_between(began, back)
            assert during, "no client noticed the outage"
            odd = [(a.what, a.status, a.body.get("message") if isinstance(a.body, dict) else a.body,
                    round(a.started - began, 2), round(a.finished - began, 2), round(back - began, 2))
                   for a in during if a.status != 503]
            assert not odd, f"while etcd was gone, answers other than 503 (what, code, message, sent, answered, " \
                            f"etcd back; seconds into the fault): {odd[:5]}"
            first_503.append(min(a.finished for a in during) - began)
        await asyncio.sleep(WARM)
        await load.settle(env.etcd.url, history)
        verdict = await verify(load, history)
    assert env.api.proc is not None and env.api.proc.alive() and env.api.proc.pid == env.pid, \
        "vc-apiserver was restarted"
    no_tracebacks(env.api)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pki.ssl_context("admin"))) as http, \
            http.get(env.api.url + "/readyz") as r:
        assert r.status == 200
    say(f"{name}: {rounds} round(s); first 503 after {', '.join(f'{t:.2f}s' for t in first_503)}; "
        f"recovered (first acknowledged write) {', '.join(f'{t:.2f}s' for t in recoveries)} after etcd was back; "
        f"{verdict.writes_acked} writes acknowledged, all in etcd's history, {verdict.objects_read_back} objects "
        f"read back; answers other than 2xx {verdict.errors}, all Status, slowest answer {verdict.slowest:.2f}s; "
        f"{verdict.events_checked} watch events checked against etcd in {verdict.sessions} sessions of "
        f"{WATCHERS} watchers ({verdict.relists} relists after ERROR/410); {verdict.lists_checked} lists checked")
    return verdict


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


# -- 2. the leader replica dies -----------------------------------------------------------------------

@dataclass
class Replicas:
    etcd: Etcd
    servers: dict[str, ApiServer]

    def log(self, name: str) -> str:
        return self.servers[name].log.read_text(errors="replace")


@pytest.fixture
def replicas(tmp_path: Path, pki_files: Pki) -> Iterator[Replicas]:
    """Two vc-apiserver replicas, a and b, on one etcd, electing a reconciler leader on a 3 s lease."""
    etcd = start_etcd(tmp_path, "etcd")
    servers = {name: ApiServer(pki_files, etcd.url, free_port(), tmp_path / f"vc-apiserver-{name}.log", extra_args=[
        "--identity", name, "--leader-elect-lease-duration", str(LEASE), "--control-plane-runtime", "none",
        "--etcd-request-timeout", str(ETCD_TIMEOUT)]) for name in ("a", "b")}
    try:
        for server in servers.values():
            server.start()
        yield Replicas(etcd, servers)
    finally:
        for server in servers.values():
            server.stop()
        etcd.stop()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> tuple[Any, float]:
    """Poll ``check`` until it returns something truthy; returns it and how long that took."""
    started = time.monotonic()
    while True:
        value = await check()
        if value:
            return value, time.monotonic() - started
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout:.0f}s"
        await asyncio.sleep(0.05)


async def test_killed_leader_is_replaced_within_the_lease_and_finalizers_are_still_removed(
        replicas: Replicas, pki_files: Pki) -> None:
    admin = EtcdAdmin(replicas.etcd.url)
    leader, _ = await eventually(lambda: admin.get(LEADER_KEY), 2 * LEASE, "a leader elected")
    follower = "b" if leader == "a" else "a"
    await asyncio.sleep(LEASE)  # the follower has tried, and failed, to take the lease meanwhile
    assert replicas.log(leader).count("became leader") == 1
    assert replicas.log(follower).count("became leader") == 0
    assert await admin.get(LEADER_KEY) == leader

    namespace = "ha"
    url = replicas.servers[follower].url + collection(namespace)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pki_files.ssl_context("admin"))) as http:

        async def gone(name: str) -> bool:
            async with http.get(f"{url}/{name}") as r:
                return r.status == 404

        async def create(name: str) -> None:
            async with http.post(url, json=vc(name, namespace)) as r:
                assert r.status == 201, await r.text()
                assert (await r.json())["metadata"]["finalizers"] == [FINALIZER]

        async def delete(name: str) -> dict[str, Any]:
            async with http.delete(f"{url}/{name}") as r:
                assert r.status == 200, await r.text()
                return await r.json()

        # Only the leader reconciles: it alone releases the finalizer of a deleted VirtualCluster.
        await create("first")
        await delete("first")
        await eventually(lambda: gone("first"), 10, "first deleted by the leader")
        assert f"deleted {namespace}/first" in replicas.log(leader)
        assert f"deleted {namespace}/first" not in replicas.log(follower)

        # The leader dies with a deletion pending; nobody holds the lease until it expires.
        await create("second")
        killed = replicas.servers[leader].proc
        assert killed is not None
        killed_at = time.monotonic()
        await asyncio.to_thread(killed.kill)
        pending = await delete("second")
        assert pending["metadata"].get("deletionTimestamp") and pending["metadata"]["finalizers"] == [FINALIZER]

        async def held_by_follower() -> bool:
            return await admin.get(LEADER_KEY) == follower
        await eventually(held_by_follower, 3 * LEASE, "the follower took the lease")
        takeover = time.monotonic() - killed_at
        await eventually(lambda: gone("second"), 10, "second deleted by the new leader")
        released = time.monotonic() - killed_at
        assert replicas.log(follower).count("became leader") == 1
        assert f"deleted {namespace}/second" in replicas.log(follower)

        await create("third")
        await delete("third")
        _, third = await eventually(lambda: gone("third"), 10, "third deleted by the new leader")
    say(f"leader {leader} SIGKILLed: {follower} held the lease {takeover:.2f}s later (lease {LEASE}s), "
        f"released the pending finalizer {released:.2f}s after the kill, a new create+delete completed in "
        f"{third:.2f}s")
    # The dead leader's lease runs out at most LEASE after the kill (it renewed it no later than that);
    # etcd expires leases on a 500 ms tick, and the follower acts on the key's deletion at once.
    assert takeover <= LEASE + 1.0, f"the follower took {takeover:.1f}s to take over a {LEASE}s lease"
    no_tracebacks(replicas.servers[follower])


# -- 3. etcd runs out of space --------------------------------------------------------------------------

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
