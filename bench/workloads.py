"""The request workloads: create, get, list, update/status, kubectl, server-side apply, memory.

Every workload runs in rounds, and each round visits every target, the order reversed on every
other round (A B, B A, ...) so that whatever drifts during the run (other jobs on the machine,
etcd's growing database, Go's GC pacing) weighs on both sides equally.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from apiserver.machinery.timefmt import now_rfc3339
from hack.harness import binary

from .client import (
    GV,
    SHARD_LABEL,
    SHARDS,
    Client,
    Response,
    collection,
    item,
    namespace_name,
    object_name,
    ready_status,
    virtualcluster,
)
from .config import NAMESPACES, Scale
from .probe import Meter, rss_bytes
from .servers import Target
from .stats import Results

T = TypeVar("T")
MiB, KiB = 1024.0 * 1024.0, 1024.0
PAGE = 500
APPLY_NAMESPACE = "bench-apply"  # apply creates its own objects, apart from the population
APPLY_MANAGER = "bench-applier"
APPLY_HEADERS = {"Accept": "application/json", "Content-Type": "application/apply-patch+yaml"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Bench:
    """What every workload shares: sizes, targets, their clients, and where numbers go."""

    scale: Scale
    targets: list[Target]
    floors: list[Target] = field(default_factory=list)  # gets and watches only: the least a backend can cost
    results: Results = field(default_factory=Results)
    clients: dict[str, Client] = field(default_factory=dict)

    def open(self) -> None:
        limit = max(32, self.scale.concurrency * 2)
        self.clients = {t.name: Client(t, limit) for t in self.targets + self.floors}

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()

    def rounds(self, count: int, targets: list[Target] | None = None) -> Iterator[tuple[int, Target]]:
        """(round, target) pairs in A B, B A, A B ... order."""
        targets = self.targets if targets is None else targets
        for r in range(count):
            for target in (targets if r % 2 == 0 else list(reversed(targets))):
                yield r, target

    def meter(self, target: Target) -> Meter:
        return Meter({k: v for k, v in target.pids.items()}).start()

    def population(self) -> list[tuple[str, str]]:
        batch = self.scale.batch
        return [(namespace_name(n), object_name(n, i)) for n in range(NAMESPACES) for i in range(batch)]


async def fan_out(concurrency: int, jobs: Sequence[T], op: Callable[[T], Awaitable[Response]]) -> tuple[float, list[float]]:
    """Run ``op`` over ``jobs`` with ``concurrency`` closed-loop clients; (wall seconds, latencies)."""
    pending = iter(jobs)
    latencies: list[float] = []

    async def worker() -> None:
        for job in pending:  # the shared iterator hands each job to exactly one worker
            latencies.append((await op(job)).seconds)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


def _ms(values: list[float]) -> list[float]:
    return [v * 1000.0 for v in values]


# -- warm-up and memory ------------------------------------------------------------------------

async def warm_up(b: Bench) -> None:
    """Open connections and touch every code path once, without storing anything."""
    sample = virtualcluster(namespace_name(0), "warm-up", 0)
    for target in b.targets:
        client = b.clients[target.name]
        for i in range(50):
            obj = {**sample, "metadata": {**sample["metadata"], "name": f"warm-up-{i}"}}
            await client.request("POST", collection(namespace_name(0)), body=obj, params={"dryRun": "All"},
                                 expect=(201,))
            await client.request("GET", item(namespace_name(0), f"warm-up-{i}"), expect=(404,))
            await client.request("GET", collection(namespace_name(0)))
            await client.request("GET", collection())
    for target in b.floors:
        for _ in range(50):
            await b.clients[target.name].request("GET", item(namespace_name(0), "warm-up", gv=target.api))


def memory(b: Bench, phase: str) -> dict[str, dict[str, int]]:
    """RSS of every process of every target, in bytes, after letting the servers settle."""
    time.sleep(b.scale.settle_seconds)
    out = {t.name: {role: rss_bytes(pid) for role, pid in t.pids.items() if pid} for t in b.targets}
    log(f"[memory:{phase}] " + "  ".join(f"{t}: " + ", ".join(f"{r}={v / MiB:.0f}MiB" for r, v in roles.items())
                                         for t, roles in out.items()))
    return out


def record_memory(b: Bench, before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                  end: dict[str, dict[str, int]] | None = None) -> None:
    objects = b.scale.batch * NAMESPACES
    server = b.results.metric("memory.server", f"RSS of the server holding {objects:,} objects", "MiB")
    per_object = b.results.metric("memory.per_object", "RSS per object ((after - empty) / objects)", "KiB")
    etcd = b.results.metric("memory.etcd", f"RSS of its etcd holding {objects:,} objects", "MiB", chart=False)
    for target in b.targets:
        name = target.name
        if target.store_of or "server" not in after.get(name, {}):
            continue  # a proxy's server is another target's: its memory is that target's
        server.add(name, after[name]["server"] / MiB)
        per_object.add(name, (after[name]["server"] - before[name]["server"]) / objects / KiB)
        if "etcd" in after[name]:
            etcd.add(name, after[name]["etcd"] / MiB)
        server.notes.setdefault("empty_MiB", {})[name] = before[name]["server"] / MiB
        if end is not None:
            server.notes.setdefault("after_all_workloads_MiB", {})[name] = end[name]["server"] / MiB


# -- 1. create -------------------------------------------------------------------------------

async def create(b: Bench) -> None:
    """The population: one round per namespace, ``batch`` objects each, ``concurrency`` clients."""
    s = b.scale
    wall = b.results.metric("create.wall", f"create {s.batch:,} objects (c={s.concurrency}): wall", "s")
    latency = b.results.metric("create.latency", "create: latency per request", "ms", chart=False)
    for r, target in b.rounds(NAMESPACES, [t for t in b.targets if not t.store_of]):
        ns = namespace_name(r)
        client = b.clients[target.name]
        objs = [virtualcluster(ns, object_name(r, i), r * s.batch + i) for i in range(s.batch)]
        meter = b.meter(target)
        seconds, lats = await fan_out(s.concurrency, objs, lambda o, ns=ns, client=client: client.request(
            "POST", collection(ns), body=o, expect=(201,)))
        b.results.record_usage("create", target.name, meter.stop().cores())
        wall.add(target.name, seconds)
        latency.add(target.name, *_ms(lats))
        log(f"[create] round {r} {target.name}: {s.batch / seconds:,.0f} obj/s ({seconds:.2f}s)")


# -- 2. get --------------------------------------------------------------------------------------

async def get(b: Bench) -> None:
    s = b.scale
    names = b.population()
    rate = b.results.metric("get.throughput", f"get by name (c={s.concurrency}): throughput", "req/s",
                            higher_is_better=True)
    latency = b.results.metric("get.latency", "get by name: latency per request", "ms", chart=False)
    for r, target in b.rounds(s.rounds, b.targets + b.floors):
        picks = random.Random(r).choices(names, k=s.gets)  # the same sequence for every target
        client = b.clients[target.name]
        meter = b.meter(target)
        gv = target.api or GV
        seconds, lats = await fan_out(s.concurrency, picks, lambda p, client=client, gv=gv: client.request(
            "GET", item(*p, gv=gv)))
        b.results.record_usage("get", target.name, meter.stop().cores())
        rate.add(target.name, s.gets / seconds)
        latency.add(target.name, *_ms(lats))
        log(f"[get] round {r} {target.name}: {s.gets / seconds:,.0f} req/s")


# -- 3, 4. list ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ListVariant:
    key: str
    title: str
    path: str
    expected: int
    params: dict[str, str] = field(default_factory=dict)
    paged: bool = False
    headers: dict[str, str] | None = None  # kube gzips large lists for clients that accept it (aiohttp does)


def list_variants(s: Scale) -> list[ListVariant]:
    total = s.batch * NAMESPACES
    ns = namespace_name(0)
    shard = {"labelSelector": f"{SHARD_LABEL}=s07"}
    return [
        ListVariant("list.ns", f"list {s.batch:,} (one namespace)", collection(ns), s.batch),
        ListVariant("list.ns.paged", f"list {s.batch:,} in limit={PAGE} pages", collection(ns), s.batch,
                    paged=True),
        ListVariant("list.all", f"list {total:,} (all namespaces)", collection(), total),
        ListVariant("list.all.paged", f"list {total:,} in limit={PAGE} pages", collection(), total, paged=True),
        ListVariant("list.all.identity", f"list {total:,}, client refusing gzip", collection(), total,
                    headers={"Accept": "application/json", "Accept-Encoding": "identity"}),
        ListVariant("list.selector", f"list all, label selector matching 1% ({total // SHARDS:,})", collection(),
                    len([i for i in range(total) if i % SHARDS == 7]), shard),
    ]


async def _check_list(client: Client, v: ListVariant) -> None:
    if v.paged:
        _, count = await client.list_pages(v.path, PAGE, v.params, decode=True)
    else:
        count = len((await client.request("GET", v.path, params=v.params, headers=v.headers)).json()["items"])
    if count != v.expected:
        raise RuntimeError(f"{client.target.name}: {v.key} returned {count} items, expected {v.expected}")


async def lists(b: Bench, only: set[str] | None = None) -> None:
    """Full lists and paginated lists, timed to the last byte; one request at a time."""
    s = b.scale
    variants = [v for v in list_variants(s) if only is None or v.key in only]
    for target in b.targets:
        for v in variants:
            await _check_list(b.clients[target.name], v)
    for r, target in b.rounds(s.rounds):
        client = b.clients[target.name]
        meter = b.meter(target)
        for v in variants:
            metric = b.results.metric(v.key, v.title, "ms", chart=v.headers is None)
            for _ in range(s.list_reps):
                started = time.perf_counter()
                if v.paged:
                    await client.list_pages(v.path, PAGE, v.params)
                else:
                    await client.request("GET", v.path, params=v.params, headers=v.headers)
                metric.add(target.name, (time.perf_counter() - started) * 1000.0)
        b.results.record_usage("list", target.name, meter.stop().cores())
        log(f"[list] round {r} {target.name}: " + ", ".join(
            f"{v.key}={b.results.metrics[v.key].samples[target.name][-1]:.0f}ms" for v in variants))


# -- 5. update and status update -----------------------------------------------------------------

async def update(b: Bench) -> None:
    """PUT a spec change to every object of a namespace, then PUT a ready status to each."""
    s = b.scale
    n = s.updates
    upd_rate = b.results.metric("update.throughput", f"update {n:,} objects (c={s.concurrency}): throughput",
                                "req/s", higher_is_better=True)
    upd_lat = b.results.metric("update.latency", "update: latency per request", "ms", chart=False)
    st_rate = b.results.metric("status.throughput", f"status update {n:,} objects (c={s.concurrency}): "
                               "throughput", "req/s", higher_is_better=True)
    st_lat = b.results.metric("status.latency", "status update: latency per request", "ms", chart=False)
    for r, target in b.rounds(s.rounds):
        ns = namespace_name(1 + r % (NAMESPACES - 1))
        client = b.clients[target.name]
        objs = (await client.request("GET", collection(ns))).json()["items"][:n]
        for obj in objs:
            obj["spec"]["promotePolicies"][0]["nodeCount"] += 1

        updated: list[dict[str, Any]] = []

        async def put(obj: dict[str, Any], client: Client = client, ns: str = ns,
                      updated: list[dict[str, Any]] = updated) -> Response:
            resp = await client.request("PUT", item(ns, obj["metadata"]["name"]), body=obj)
            updated.append(resp.json())
            return resp
        meter = b.meter(target)
        seconds, lats = await fan_out(s.concurrency, objs, put)
        b.results.record_usage("update", target.name, meter.stop().cores())
        upd_rate.add(target.name, len(objs) / seconds)
        upd_lat.add(target.name, *_ms(lats))

        now = now_rfc3339()
        for obj in updated:
            obj["status"] = ready_status(obj, now)
        meter = b.meter(target)
        st_seconds, st_lats = await fan_out(s.concurrency, updated, lambda o, client=client, ns=ns: client.request(
            "PUT", item(ns, o["metadata"]["name"], "status"), body=o))
        b.results.record_usage("status", target.name, meter.stop().cores())
        st_rate.add(target.name, len(updated) / st_seconds)
        st_lat.add(target.name, *_ms(st_lats))
        log(f"[update] round {r} {target.name}: update {len(objs) / seconds:,.0f} req/s, "
            f"status {len(updated) / st_seconds:,.0f} req/s")


# -- 7. kubectl ------------------------------------------------------------------------------------

async def _kubectl(target: Target, cache: str, timeout: float, capture: bool = False) -> tuple[float, bytes]:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        binary("kubectl"), "--kubeconfig", str(target.kubeconfig), "--cache-dir", cache, "get", "vc", "-A",
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{target.name}: kubectl get vc -A: {err.decode(errors='replace')}")
    return seconds, out or b""


async def kubectl(b: Bench, cache_root: str) -> None:
    """Wall time of the real kubectl printing every object as a table (its default chunks of 500)."""
    s = b.scale
    total = s.batch * NAMESPACES
    metric = b.results.metric("kubectl.wall", f"kubectl get vc -A ({total:,} rows): wall", "s")
    for target in b.targets:  # warm the discovery cache and check the output once
        _, out = await _kubectl(target, f"{cache_root}/{target.name}", s.kubectl_timeout, capture=True)
        rows = out.decode().splitlines()
        if len(rows) != total + 1 or "PHASE" not in rows[0]:
            raise RuntimeError(f"{target.name}: kubectl printed {len(rows)} lines, header {rows[:1]}")
    for r, target in b.rounds(s.rounds):
        meter = b.meter(target)
        seconds, _ = await _kubectl(target, f"{cache_root}/{target.name}", s.kubectl_timeout)
        b.results.record_usage("kubectl", target.name, meter.stop().cores())
        metric.add(target.name, seconds)
        log(f"[kubectl] round {r} {target.name}: {seconds:.2f}s")


# -- 9. server-side apply --------------------------------------------------------------------------

def _applied(target: Target, round_: int, index: int, generation: int) -> dict[str, Any]:
    """The configuration one applier keeps for an object: the population's shape, and at each
    generation a new node count and label value."""
    name = f"apply-{target.name}-{round_}-{index:05d}"  # a proxy target writes into another's store
    obj = virtualcluster(APPLY_NAMESPACE, name, index)
    obj["metadata"]["labels"]["generation"] = str(generation)
    obj["spec"]["promotePolicies"][0]["nodeCount"] = 1 + generation
    return obj


async def apply(b: Bench) -> None:
    """Server-side apply by one field manager, 16 clients: apply-create (each object absent, so the
    apply creates it), then apply-update (a changed configuration applied to each: the merge, the
    conflict check and the Apply entry on every write)."""
    s = b.scale
    n = s.updates
    metrics = {
        step: (b.results.metric(f"apply.{step}.throughput",
                                f"apply-{step} {n:,} objects (c={s.concurrency}): throughput", "req/s",
                                higher_is_better=True),
               b.results.metric(f"apply.{step}.latency", f"apply-{step}: latency per request", "ms", chart=False))
        for step in ("create", "update")}
    for r, target in b.rounds(s.rounds):
        client = b.clients[target.name]
        rates = []
        for generation, (step, code) in enumerate((("create", 201), ("update", 200))):
            objs = [_applied(target, r, i, generation) for i in range(n)]
            meter = b.meter(target)
            seconds, lats = await fan_out(s.concurrency, objs, lambda o, client=client, code=code: client.request(
                "PATCH", item(APPLY_NAMESPACE, o["metadata"]["name"]), body=o, params={"fieldManager": APPLY_MANAGER},
                headers=APPLY_HEADERS, expect=(code,)))
            b.results.record_usage(f"apply-{step}", target.name, meter.stop().cores())
            rate, latency = metrics[step]
            rate.add(target.name, n / seconds)
            latency.add(target.name, *_ms(lats))
            rates.append(f"{step} {n / seconds:,.0f} req/s")
        log(f"[apply] round {r} {target.name}: " + ", ".join(rates))
