"""The load fault tests run under: 16 writers, 50 watchers and 2 auditors against one vc-apiserver,
recording every answer.

Writers create, patch a counter annotation and delete; watchers behave as client-go's reflector
does (list, watch from the list's resourceVersion, resume from the last resourceVersion seen,
relist after a 410 or an ERROR event); auditors keep listing. What they recorded is judged
against etcd's history by :func:`tests.support.faults.verify`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from hack.harness import ApiServer, Pki
from tests.conftest import vc
from tests.support.etcdadmin import lines
from tests.support.history import Change, History

__all__ = ["AUDITORS", "CLIENT_TIMEOUT", "CLUSTER_WATCHERS", "NAMESPACES", "PACE", "WATCHERS", "WRITERS", "WRITES",
           "Answer", "Load", "Session", "Watcher", "Written", "collection"]

WRITERS, WATCHERS, CLUSTER_WATCHERS, AUDITORS, NAMESPACES = 16, 50, 4, 2, 8
PACE = 0.1  # seconds between a writer's requests
CLIENT_TIMEOUT = 10.0  # no answer may take longer than this
GROUP_PATH = "/apis/kosmos.io/v1alpha1"
WRITES = ("create", "patch", "delete")


def collection(namespace: str | None) -> str:
    return f"{GROUP_PATH}/namespaces/{namespace}/virtualclusters" if namespace else f"{GROUP_PATH}/virtualclusters"


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

