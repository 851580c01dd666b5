"""A fault run under load, and what every fault must leave behind.

:func:`survive` runs a fault (etcd killed, frozen, restarted...) some rounds while
:class:`~tests.support.load.Load` writes, watches and lists, then :func:`verify` holds what the
clients were told to etcd's own history: every failure a Status (503 while etcd is gone), every
acknowledged write a commit in etcd and still readable, every list etcd's state at its
resourceVersion, every watcher session shown exactly the changes of its objects in order (a 410
ends a session, a silently missed event fails the test).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from hack.harness import ApiServer, Etcd, Pki
from tests.support import SOAK
from tests.support.history import History, difference, scoped
from tests.support.load import CLIENT_TIMEOUT, WATCHERS, Load
from tests.support.report import say as report

__all__ = ["ETCD_TIMEOUT", "LEASE", "ROUNDS", "WARM", "Isolated", "Verdict", "no_tracebacks", "say", "survive",
           "verify"]

ROUNDS = 4 if SOAK else 1  # faults per test (the full restart does two kinds per round)
WARM = 4.0 if SOAK else 1.5  # seconds of normal traffic before each fault and after the last
ETCD_TIMEOUT = 2  # --etcd-request-timeout: how long the server waits on etcd before answering 503
LEASE = 3  # --leader-elect-lease-duration


def say(line: str) -> None:
    """A measured number, printed even when pytest captures output (as ``make test`` does)."""
    report(f"[faults] {line}")


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


@dataclass
class Isolated:
    """An etcd and a vc-apiserver of a test's own (the ``isolated`` fixture)."""

    etcd: Etcd
    api: ApiServer
    pid: int  # the server's: a fault must not make it restart


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

