"""6. Watch fan-out: many watchers on one namespace while a writer patches at a steady rate.

The delay of one write is from its acknowledgement (the PATCH response) to the moment the
*last* watcher has received the event carrying its resourceVersion: what a fleet of informers
experiences. Writes are open-loop (sent on schedule, not after the previous answer) so a slow
server cannot slow the writer down and hide its own lag. Watchers find the resourceVersion with
a regex instead of decoding each event: 200 watchers x 100 events/s would otherwise make the
Python client, not the servers, the thing measured. The client's cost of ingesting every copy
remains in the numbers, equally for both servers; its CPU use is reported next to them.
"""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp

from .client import MERGE_PATCH, Client, collection, item, virtualcluster
from .servers import Target
from .workloads import Bench, log

WATCH_NAMESPACE = "bench-watch"
_RV = re.compile(rb'"resourceVersion":"(\d+)"')  # the first one in an event is metadata's


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


async def _watcher(session: aiohttp.ClientSession, path: str, rv: str, arrivals: Arrivals,
                   ready: asyncio.Queue[None]) -> None:
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"}
    async with session.get(path, params=params, headers={"Accept": "application/json"}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"watch {path}: {resp.status} {(await resp.read())[:300]!r}")
        ready.put_nowait(None)
        tail = b""
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                match = _RV.search(line)
                if match:
                    arrivals.record(match.group(1), now)


async def _ensure_objects(client: Client, count: int) -> list[str]:
    names = [f"w-{i:03d}" for i in range(count)]
    for i, name in enumerate(names):
        await client.request("POST", collection(WATCH_NAMESPACE), body=virtualcluster(WATCH_NAMESPACE, name, i),
                             expect=(201, 409))
    return names


async def _round(b: Bench, target: Target, names: list[str]) -> tuple[list[float], int]:
    s = b.scale
    client = b.clients[target.name]
    path = collection(WATCH_NAMESPACE)
    rv = (await client.request("GET", path)).json()["metadata"]["resourceVersion"]
    arrivals = Arrivals(s.watchers)
    ready: asyncio.Queue[None] = asyncio.Queue()
    session = aiohttp.ClientSession(base_url=target.url, connector=aiohttp.TCPConnector(
        ssl=target.ssl_context(), limit=s.watchers + 4), timeout=aiohttp.ClientTimeout(total=None))
    watchers = [asyncio.create_task(_watcher(session, path, rv, arrivals, ready)) for _ in range(s.watchers)]
    acks: dict[bytes, float] = {}
    try:
        for _ in range(s.watchers):
            getter = asyncio.ensure_future(ready.get())
            done, _ = await asyncio.wait([getter, *watchers], timeout=60, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                for w in done:
                    w.result()  # a watcher that ended early raises its error here
                raise TimeoutError(f"{target.name}: watchers did not start")
        await asyncio.sleep(0.5)

        async def write(seq: int) -> None:
            body = {"metadata": {"annotations": {"bench.kosmos.io/seq": str(seq)}}}
            resp = await client.request("PATCH", item(WATCH_NAMESPACE, names[seq % len(names)]), body=body,
                                        headers=MERGE_PATCH)
            acks[resp.json()["metadata"]["resourceVersion"].encode()] = time.perf_counter()

        count = int(s.watch_rate * s.watch_seconds)
        started = time.perf_counter()
        writes = []
        for seq in range(count):
            delay = started + seq / s.watch_rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            writes.append(asyncio.create_task(write(seq)))
        await asyncio.gather(*writes)
        await arrivals.wait_complete(set(acks), 30)
    finally:
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await session.close()
    delays = [(arrivals.seen[rv][1] - acked) * 1000.0 for rv, acked in acks.items() if rv in arrivals.complete]
    return delays, len(acks) - len(delays)


async def fan_out_watch(b: Bench) -> None:
    s = b.scale
    metric = b.results.metric("watch.delay", f"watch fan-out, {s.watchers} watchers, {s.watch_rate:.0f} writes/s: "
                              "write ack to last watcher", "ms")
    metric.chart_p99 = True
    names: dict[str, list[str]] = {}
    for target in b.targets:
        names[target.name] = await _ensure_objects(b.clients[target.name], s.watch_objects)
    for r, target in b.rounds(s.rounds):
        meter = b.meter(target)
        delays, lost = await _round(b, target, names[target.name])
        b.results.record_usage("watch", target.name, meter.stop().cores())
        metric.add(target.name, *delays)
        metric.notes.setdefault("undelivered", {}).setdefault(target.name, 0)
        metric.notes["undelivered"][target.name] += lost
        delays.sort()
        p50 = delays[len(delays) // 2] if delays else float("nan")
        log(f"[watch] round {r} {target.name}: {len(delays)} events to all {s.watchers} watchers, p50 {p50:.1f}ms"
            + (f", {lost} not delivered to all" if lost else ""))
