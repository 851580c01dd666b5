"""6. Watch fan-out: many watchers on one namespace while a writer patches at a steady rate.

The delay of one write is from its acknowledgement (the PATCH response) to the moment the
*last* watcher has received the event carrying its resourceVersion: what a fleet of informers
experiences. Writes are open-loop (sent on schedule, not after the previous answer) so a slow
server cannot slow the writer down and hide its own lag. The watchers are the lean protocol of
:mod:`bench.stream` and resume after the server closes them, as informers do (kube-apiserver
closes watchers that fall behind: the count is reported as ``rewatches``). The client's cost of
ingesting every copy is in the numbers, equally for every server, and its CPU use is reported.

The floor behind the aggregator (``bench/floorserver``) runs the same rounds: before each of its
rounds it is given ours' current objects of the namespace, so its events carry the same bodies,
and it answers each PATCH with the patched object under a fresh resourceVersion, then sends that
event to its watchers. Its delay is the aggregator hop's own; what ours adds is the rest.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from apiserver.apis.resource import VIRTUALCLUSTERS as VC

from .client import GV, MERGE_PATCH, Client, RequestFailed, collection, item, virtualcluster
from .servers import Target
from .stream import Informer
from .workloads import Bench, log

WATCH_NAMESPACE = "bench-watch"


class Arrivals:
    """Per resourceVersion: how many watchers saw it, and when the last one did."""

    def __init__(self, watchers: int) -> None:
        self.watchers = watchers
        self.seen: dict[bytes, list[float]] = {}  # rv -> [count, last perf_counter]
        self.complete: set[bytes] = set()  # seen by every watcher
        self.progress = asyncio.Event()

    def record(self, rv: bytes, now: float) -> None:
        entry = self.seen.get(rv)
        if entry is None:
            entry = self.seen[rv] = [0.0, now]
        entry[0] += 1
        entry[1] = now
        if entry[0] >= self.watchers:
            self.complete.add(rv)
            self.progress.set()

    async def wait_complete(self, rvs: set[bytes], timeout: float) -> None:
        """Until every rv in ``rvs`` reached every watcher, or ``timeout``."""
        deadline = time.monotonic() + timeout
        while not rvs <= self.complete and time.monotonic() < deadline:
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return


async def _ensure_objects(client: Client, count: int) -> list[str]:
    names = [f"w-{i:03d}" for i in range(count)]
    for i, name in enumerate(names):
        await client.request("POST", collection(WATCH_NAMESPACE), body=virtualcluster(WATCH_NAMESPACE, name, i),
                             expect=(201, 409))
    return names


async def _copy_objects(source: Client, floor: Client, gv: str) -> list[str]:
    """Ours' objects of the watch namespace, as they are now, stored on the floor as they are."""
    items = (await source.request("GET", collection(WATCH_NAMESPACE))).json()["items"]
    for obj in items:
        obj.setdefault("apiVersion", VC.group_version)
        obj.setdefault("kind", VC.kind)
        await floor.request("POST", collection(WATCH_NAMESPACE, gv), body=obj, expect=(201,))
    return sorted(obj["metadata"]["name"] for obj in items)


async def _round(b: Bench, target: Target, names: list[str]) -> tuple[list[float], list[float], dict[str, int]]:
    """Per event that reached every watcher: ms from the write's acknowledgement, and from its sending,
    to the last watcher's copy."""
    s = b.scale
    client = b.clients[target.name]
    gv = target.api or GV
    if target.api:  # a floor: the bodies ours would send now
        names = await _copy_objects(b.clients[target.store_of], client, gv)
    path = collection(WATCH_NAMESPACE, gv)
    rv = (await client.request("GET", path)).json()["metadata"]["resourceVersion"]
    arrivals = Arrivals(s.watchers)
    ctx = target.ssl_context()
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"}
    gate = asyncio.Semaphore(20)  # connect in waves: 200 simultaneous TLS handshakes only measure accept()

    async def connect() -> Informer:
        async with gate:
            return await Informer(target.url, path, params, ctx, arrivals.record).start()

    acks: dict[bytes, tuple[float, float]] = {}  # rv -> (the PATCH sent, its answer received)
    failed: list[str] = []
    opened = await asyncio.gather(*(connect() for _ in range(s.watchers)), return_exceptions=True)
    watchers = [w for w in opened if isinstance(w, Informer)]
    try:
        errors = [w for w in opened if not isinstance(w, Informer)]
        if errors:
            raise RuntimeError(f"{target.name}: {len(errors)} watchers failed to start: {errors[0]}")
        await asyncio.sleep(0.5)

        token = f"{time.time_ns():x}"  # a value never written before: a no-op patch makes no event

        async def write(seq: int) -> None:
            body = {"metadata": {"annotations": {"bench.kosmos.io/seq": f"{token}-{seq}"}}}
            sent = time.perf_counter()
            try:
                resp = await client.request("PATCH", item(WATCH_NAMESPACE, names[seq % len(names)], gv=gv), body=body,
                                            headers=MERGE_PATCH)
            except (RequestFailed, aiohttp.ClientError) as e:  # an overloaded server answers 503 or 504
                failed.append(str(e))
                return
            acks[resp.json()["metadata"]["resourceVersion"].encode()] = (sent, time.perf_counter())

        count = int(s.watch_rate * s.watch_seconds)
        meter = b.meter(target)
        started = time.perf_counter()
        writes = []
        for seq in range(count):
            delay = started + seq / s.watch_rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            writes.append(asyncio.create_task(write(seq)))
        await asyncio.gather(*writes)
        await arrivals.wait_complete(set(acks), 30)
        b.results.record_usage("watch", target.name, meter.stop().cores())
        restarts = sum(w.restarts for w in watchers)
    finally:
        await asyncio.gather(*(w.stop() for w in watchers), return_exceptions=True)
        await asyncio.sleep(2.0)  # let the server drain what it still had queued before the next round
    if failed:
        log(f"[watch] {target.name}: {len(failed)} writes failed, e.g. {failed[0]}")
    complete = [(arrivals.seen[rv][1], sent, acked) for rv, (sent, acked) in acks.items() if rv in arrivals.complete]
    delays = [(last - acked) * 1000.0 for last, _, acked in complete]
    from_sent = [(last - sent) * 1000.0 for last, sent, _ in complete]
    return delays, from_sent, {"undelivered": len(acks) - len(delays), "failed_writes": len(failed),
                               "rewatches": restarts}


async def terminated_watchers(client: Client) -> int | None:
    """kube-apiserver's own count of watchers it closed for falling behind (None: not exposed)."""
    try:
        text = (await client.request("GET", "/metrics", headers={"Accept": "text/plain"})).body.decode()
    except RequestFailed:
        return None
    lines = [line for line in text.splitlines()
             if line.startswith("apiserver_terminated_watchers_total{") and "virtualclusters" in line]
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in lines)) if lines else None


async def fan_out_watch(b: Bench) -> None:
    s = b.scale
    metric = b.results.metric("watch.delay", f"watch fan-out, {s.watchers} watchers, {s.watch_rate:.0f} writes/s: "
                              "write ack to last watcher", "ms")
    metric.chart_p99 = True
    # From the write's sending: the write's own trip is in it, so the figure stays positive when the
    # watchers have an event before its writer has the answer (the delay above is then 0 or less).
    end_to_end = b.results.metric("watch.sent", f"watch fan-out, {s.watchers} watchers, {s.watch_rate:.0f} writes/s: "
                                  "write sent to last watcher", "ms")
    end_to_end.chart_p99 = True
    names: dict[str, list[str]] = {}
    for target in b.targets:
        names[target.name] = await _ensure_objects(b.clients[target.name], s.watch_objects)
    for r, target in b.rounds(s.rounds, b.targets + b.floors):
        delays, from_sent, counts = await _round(b, target, names.get(target.name, []))
        metric.add(target.name, *delays)
        end_to_end.add(target.name, *from_sent)
        for note, count in counts.items():
            metric.notes.setdefault(note, {}).setdefault(target.name, 0)
            metric.notes[note][target.name] += count
        delays.sort()
        p50 = delays[len(delays) // 2] if delays else float("nan")
        log(f"[watch] round {r} {target.name}: {len(delays)} events to all {s.watchers} watchers, p50 {p50:.1f}ms, "
            + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for target in b.targets:
        count = await terminated_watchers(b.clients[target.name])
        if count is not None:
            metric.notes.setdefault("server_terminated_watchers", {})[target.name] = count
