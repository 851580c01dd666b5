"""Shared-slice benchmark: a tenant Deployment scaled 0 → N on a shared slice, against the same N pods
created directly in the host, in the same run.

- **Ours**: one VirtualCluster (process runtime) whose ``promoteResources.resources`` is a slice big
  enough for N pods (``pods: N+10`` in the slice, so the quota and the node hold them all). A tenant
  Deployment at 0 replicas is scaled to N; the clock runs from the scale request to the moment every
  one of its N tenant pods is ``Running`` (the tenant's controllers and scheduler, the syncer's host
  create, the host's quota admission, scheduler and kwok, and the status back up the syncer).
- **Floor**: the same Deployment (same pod template) in a host namespace beside the slice's, with the
  slice namespace's Pod Security labels, ResourceQuota and LimitRange copied: the host's own
  controllers, quota admission, scheduler and kwok, and nothing of ours. It is not the slice's own
  namespace because the syncer watches that one and would wake on every floor pod, slowing the
  floor with work that is not the floor's.

Pods are counted by one metadata-only list per poll (``fieldSelector=status.phase=Running``), not by
N gets. vc-apiserver's CPU time (utime + stime of its own process: the syncer runs inside it; tenant
control planes are other processes) and RSS are read before and after each scale-up; CPU is also
read over the floor's window, vc-apiserver's background rate with nothing to sync, which the net
figure subtracts. Both sides are scaled to 0 and waited until gone between rounds, after one 1-pod
warm-up each (the tenant's default ServiceAccount, the first Deployment of each controller manager).
The syncer's passes, host pod creates and tenant status writes during the scale-up are read from the
apiservers' own request counters.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from hack.stack import Stack, StackPorts
from reconciler.shared import names

from .controlplane import rss_kib
from .stats import Ratio

GV = "/apis/kosmos.io/v1alpha1"
NS = "default"  # the VirtualCluster's namespace on the host, and the Deployment's in the tenant
VC_NAME = "slice"
FLOOR_NS = "bench-shared-floor"
APP = "bench-shared"
BUSYBOX = "docker.io/library/busybox:1.36"
REQUESTS = {"cpu": "10m", "memory": "16Mi"}
PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
POLL = 0.25  # seconds between counts
PODS_PER_HOST_NODE = 100  # of a kwok node's 110
BEGIN, END = "<!-- bench:shared:begin -->", "<!-- bench:shared:end -->"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def slice_for(pods: int) -> dict[str, str]:
    """Room for ``pods`` with a margin: 0.1 cpu and 64Mi each, plus one cpu and 1Gi."""
    return {"cpu": f"{math.ceil(pods * 0.1) + 1}", "memory": f"{pods * 64 + 1024}Mi", "pods": str(pods + 10)}


def virtualcluster(pods: int) -> dict[str, Any]:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster", "metadata": {"name": VC_NAME, "namespace": NS},
            "spec": {"promoteResources": {"resources": slice_for(pods)}}}


def deployment(namespace: str, replicas: int = 0) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": APP}},
                     "template": {"metadata": {"labels": {"app": APP}}, "spec": {
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"],
                                         "resources": {"requests": dict(REQUESTS)}}]}}}}


# -- measuring ------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its children, the tenant control planes, are not counted)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


async def count(client: KubeClient, namespace: str, running: bool, labels: str = f"app={APP}") -> int:
    """Pods in ``namespace`` (only the Running ones if ``running``), by one metadata-only list."""
    params = {"labelSelector": labels} if labels else {}
    if running:
        params["fieldSelector"] = "status.phase=Running"
    auth = await client.credentials.current()
    session = await client._session_for(auth)
    async with session.get(client.server + f"/api/v1/namespaces/{namespace}/pods", params=params,
                           headers={**client._headers(auth), "Accept": PARTIAL_LIST},
                           server_hostname=client.access.tls_server_name or None) as resp:
        body = await resp.read()
        if resp.status >= 400:
            raise HostError(resp.status, orjson.loads(body or b"{}"))
    return len(orjson.loads(body).get("items") or [])


_LABEL = re.compile(r'(\w+)="([^"]*)"')


async def requests(client: KubeClient) -> dict[tuple[str, str, str], float]:
    """An apiserver's own count of the core-group requests it served: (verb, resource, subresource) → n."""
    text = (await client.request("GET", "/metrics", raw=True)).decode()
    counts: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line[len("apiserver_request_total{"):].rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if labels.get("group", ""):
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def delta(before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float],
          verb: str, resource: str, subresource: str = "") -> int:
    key = (verb, resource, subresource)
    return round(after.get(key, 0.0) - before.get(key, 0.0))


async def scale(client: KubeClient, namespace: str, replicas: int) -> None:
    await client.patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/{APP}", {"spec": {"replicas": replicas}})


async def until_count(client: KubeClient, namespace: str, want: int, running: bool, timeout: float, what: str,
                      labels: str = f"app={APP}") -> tuple[float, float | None]:
    """Seconds until exactly ``want`` pods are counted, and until the first one was (None if ``want`` is 0)."""
    started = time.perf_counter()
    first = None
    seen = -1
    while True:
        try:
            seen = await count(client, namespace, running, labels)
        except (HostError, HostUnavailable) as e:  # a saturated server's 429/503 is retried, as any client would
            if isinstance(e, HostError) and e.code not in (429, 503, 504):
                raise
        elapsed = time.perf_counter() - started
        if seen > 0 and first is None:
            first = elapsed
        if seen == want:
            return elapsed, first
        if elapsed > timeout:
            raise TimeoutError(f"{what}: {seen} of {want} after {timeout:.0f}s")
        await asyncio.sleep(POLL)


async def get_vc(host: KubeClient) -> dict[str, Any]:
    return dict(await host.get(f"{GV}/namespaces/{NS}/virtualclusters/{VC_NAME}"))


async def wait_completed(host: KubeClient, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            obj = await get_vc(host)
            status = obj.get("status") or {}
            if status.get("phase") == "Completed" and (status.get("sharedResources") or {}).get("namespace"):
                return obj
        except (HostError, HostUnavailable) as e:
            if isinstance(e, HostError) and e.code not in (429, 503, 504):
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"VirtualCluster {VC_NAME} not Completed with a shared slice after {timeout:.0f}s")
        await asyncio.sleep(1.0)


async def floor_namespace(host: KubeClient, slice_ns: str) -> None:
    """A host namespace like the slice's: its Pod Security labels, its quota and its defaults."""
    labels = (await host.get(f"/api/v1/namespaces/{slice_ns}"))["metadata"].get("labels") or {}
    await host.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": FLOOR_NS, "labels": {k: v for k, v in labels.items() if k.startswith("pod-security.")}}})
    for plural, kind, name in (("resourcequotas", "ResourceQuota", names.QUOTA),
                               ("limitranges", "LimitRange", names.LIMIT_RANGE)):
        spec = (await host.get(f"/api/v1/namespaces/{slice_ns}/{plural}/{name}"))["spec"]
        await host.create(f"/api/v1/namespaces/{FLOOR_NS}/{plural}", {
            "apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": FLOOR_NS}, "spec": spec})
    deadline = time.monotonic() + 60
    while not ((await host.get(f"/api/v1/namespaces/{FLOOR_NS}/resourcequotas/{names.QUOTA}")).get("status")
               or {}).get("hard"):
        if time.monotonic() > deadline:
            raise TimeoutError("the floor namespace's quota was never accounted")
        await asyncio.sleep(0.5)


class Round:
    """One side's scale-up and scale-down; ``settle`` also waits for the slice's host pods to go."""

    def __init__(self, client: KubeClient, namespace: str, pods: int,
                 mirror: tuple[KubeClient, str, str] | None = None) -> None:
        self.client, self.namespace, self.pods, self.mirror = client, namespace, pods, mirror

    async def up(self, replicas: int) -> dict[str, Any]:
        timeout = 180 + replicas * 1.5
        host_running: list[float] = []

        async def mirror_running() -> None:  # when the slice's host pods were all Running (a diagnosis only)
            assert self.mirror is not None
            client, namespace, labels = self.mirror
            elapsed, _ = await until_count(client, namespace, replicas, True, timeout, "host pods of the slice",
                                           labels)
            host_running.append(elapsed)
        started = time.perf_counter()
        await scale(self.client, self.namespace, replicas)
        side = asyncio.create_task(mirror_running()) if self.mirror else None
        elapsed, first = await until_count(self.client, self.namespace, replicas, True, timeout,
                                           f"Running pods in {self.namespace}")
        total = time.perf_counter() - started
        if side is not None:
            await side
        return {"all_running_s": total, "until_counted_s": elapsed, "first_running_s": first,
                "host_all_running_s": host_running[0] if host_running else None}

    async def down(self) -> float:
        started = time.perf_counter()
        await scale(self.client, self.namespace, 0)
        timeout = 180 + self.pods
        await until_count(self.client, self.namespace, 0, False, timeout, f"pods gone from {self.namespace}")
        if self.mirror:
            client, namespace, labels = self.mirror
            await until_count(client, namespace, 0, False, timeout, "host pods of the slice gone", labels)
        return time.perf_counter() - started


async def run(workdir: Path, pods: int = 500, rounds: int = 3, say: Callable[[str], None] = print) -> dict[str, Any]:
    host_nodes = max(3, math.ceil(pods / PODS_PER_HOST_NODE) + 1)
    stack = Stack(workdir, StackPorts.free(), runtime="process")
    started = time.monotonic()
    await asyncio.to_thread(stack.up, host_nodes)
    host = KubeClient.from_kubeconfig(stack.kubeconfig, timeout=60)
    tenant: KubeClient | None = None
    ours_s, floor_s, rounds_out = [], [], []
    try:
        await host.create(f"{GV}/namespaces/{NS}/virtualclusters", virtualcluster(pods))
        obj = await wait_completed(host)
        slice_ns = obj["status"]["sharedResources"]["namespace"]
        raw = await host.get(f"{GV}/namespaces/{NS}/virtualclusters/{VC_NAME}/kubeconfig")
        path = workdir / "tenant.kubeconfig"
        path.write_bytes(orjson.dumps(raw))
        tenant = KubeClient.from_kubeconfig(path, timeout=60)
        await floor_namespace(host, slice_ns)
        await tenant.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(NS))
        await host.create(f"/apis/apps/v1/namespaces/{FLOOR_NS}/deployments", deployment(FLOOR_NS))
        setup = time.monotonic() - started
        say(f"shared: stack with {host_nodes} kwok nodes and a slice of {slice_for(pods)} in {setup:.0f}s; "
            f"host namespace {slice_ns}")
        slice_labels = f"{names.VC_UID}={obj['metadata']['uid']}"
        ours = Round(tenant, NS, pods, mirror=(host, slice_ns, slice_labels))
        floor = Round(host, FLOOR_NS, pods)
        for side in (ours, floor):  # warm-up: one pod each way
            await side.up(1)
            await side.down()
        pid = stack.api.proc.pid if stack.api.proc is not None else None
        assert pid, "vc-apiserver's pid"
        for i in range(rounds):
            host0, tenant0 = await requests(host), await requests(tenant)
            cpu0, rss0 = cpu_seconds(pid), rss_kib(pid)
            o = await ours.up(pods)
            cpu1, rss1 = cpu_seconds(pid), rss_kib(pid)
            host1, tenant1 = await requests(host), await requests(tenant)
            # What the syncer did meanwhile, as the apiservers counted it: nothing else lists the host's
            # events or creates host pods in this window, and only the syncer PUTs tenant pod status.
            syncer = {"passes": delta(host0, host1, "LIST", "events"),
                      "host_pod_creates": delta(host0, host1, "POST", "pods"),
                      "tenant_status_writes": delta(tenant0, tenant1, "PUT", "pods", "status"),
                      "tenant_pod_lists": delta(tenant0, tenant1, "LIST", "pods")}
            o_down = await ours.down()
            cpu2 = cpu_seconds(pid)
            f = await floor.up(pods)
            cpu3 = cpu_seconds(pid)
            f_down = await floor.down()
            idle_cores = (cpu3 - cpu2) / f["all_running_s"]
            cpu_ms = (cpu1 - cpu0) * 1000 / pods
            net_ms = max(0.0, cpu1 - cpu0 - idle_cores * o["all_running_s"]) * 1000 / pods
            r = {"ours": o, "floor": f, "ratio": o["all_running_s"] / f["all_running_s"],
                 "ours_scale_down_s": o_down, "floor_scale_down_s": f_down,
                 "vc_apiserver_cpu_ms_per_pod": cpu_ms, "vc_apiserver_net_cpu_ms_per_pod": net_ms,
                 "vc_apiserver_idle_cores": idle_cores, "vc_apiserver_rss_kib_before": rss0,
                 "vc_apiserver_rss_kib_after": rss1, "vc_apiserver_rss_growth_kib_per_pod": (rss1 - rss0) / pods,
                 "syncer": syncer}
            rounds_out.append(r)
            ours_s.append(o["all_running_s"])
            floor_s.append(f["all_running_s"])
            say(f"shared: round {i}: {pods} pods Running in the tenant after {o['all_running_s']:.1f}s "
                f"(host pods all Running after {o['host_all_running_s']:.1f}s), floor {f['all_running_s']:.1f}s, "
                f"ratio {r['ratio']:.2f}; vc-apiserver {cpu_ms:.1f} ms CPU/pod ({net_ms:.1f} net), "
                f"RSS {(rss1 - rss0) / pods:+.1f} KiB/pod; syncer {syncer}")
    finally:
        if tenant is not None:
            await tenant.close()
        await host.close()
        await asyncio.to_thread(stack.down)
    ours_p50, floor_p50 = statistics.median(ours_s), statistics.median(floor_s)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds_out)
    return {"measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "pods": pods, "rounds": rounds,
            "host_nodes": host_nodes, "slice": slice_for(pods), "requests": REQUESTS, "setup_s": round(setup, 1),
            "ours": {"p50": ours_p50, "max": max(ours_s), "pods_per_s": pods / ours_p50},
            "floor": {"p50": floor_p50, "max": max(floor_s), "pods_per_s": pods / floor_p50},
            "ratio_ours_over_floor": ours_p50 / floor_p50,
            "ours_host_all_running_p50": statistics.median(r["ours"]["host_all_running_s"] for r in rounds_out),
            "vc_apiserver_cpu_ms_per_pod": med("vc_apiserver_cpu_ms_per_pod"),
            "vc_apiserver_net_cpu_ms_per_pod": med("vc_apiserver_net_cpu_ms_per_pod"),
            "vc_apiserver_idle_cores": med("vc_apiserver_idle_cores"),
            "vc_apiserver_rss_growth_kib_per_pod": med("vc_apiserver_rss_growth_kib_per_pod"),
            "vc_apiserver_rss_mib_after": med("vc_apiserver_rss_kib_after") / 1024,
            "syncer_passes": statistics.median(r["syncer"]["passes"] for r in rounds_out),
            "syncer_tenant_status_writes": statistics.median(r["syncer"]["tenant_status_writes"] for r in rounds_out),
            "per_round": rounds_out}


# -- reports --------------------------------------------------------------------------------------

def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bar: the host Deployment's 0 → all Running / ours (> 1: ours is faster); goal ≤ 1.3 alike."""
    return [(f"shared slice, 0 → {r['pods']} pods Running", 1 / r["ratio_ours_over_floor"], 1 / 1.3)]


def render(r: dict[str, Any]) -> str:
    o, f = r["ours"], r["floor"]
    return "\n".join([
        f"shared slice ({r['pods']} pods, {r['host_nodes']} kwok host nodes; seconds, p50 / worst of {r['rounds']})",
        f"  0 -> {r['pods']} Running, tenant Deployment on the slice   {o['p50']:7.1f} / {o['max']:.1f}"
        f"   {o['pods_per_s']:6.1f} pods/s   (host pods all Running at {r['ours_host_all_running_p50']:.1f})",
        f"  0 -> {r['pods']} Running, the same Deployment in the host  {f['p50']:7.1f} / {f['max']:.1f}"
        f"   {f['pods_per_s']:6.1f} pods/s",
        f"  ours / floor                                      {r['ratio_ours_over_floor']:7.2f}   (goal <= 1.3)",
        f"  vc-apiserver CPU per pod                          {r['vc_apiserver_cpu_ms_per_pod']:7.1f} ms"
        f"   ({r['vc_apiserver_net_cpu_ms_per_pod']:.1f} ms net of its {r['vc_apiserver_idle_cores']:.3f}-core "
        f"background)",
        f"  vc-apiserver RSS growth per pod                   {r['vc_apiserver_rss_growth_kib_per_pod']:7.1f} KiB"
        f"   ({r['vc_apiserver_rss_mib_after']:.0f} MiB after the scale-up)",
    ] + ([f"  syncer during the scale-up                        {r['syncer_passes']:7.0f} passes, "
           f"{r['syncer_tenant_status_writes']:.0f} tenant status writes"] if "syncer_passes" in r else []))


def render_markdown(r: dict[str, Any]) -> str:
    o, f = r["ours"], r["floor"]
    slice_ = ", ".join(f"{k}: {v}" for k, v in r["slice"].items())
    return "\n".join([
        BEGIN,
        f"Measured {r['measured']}: {r['pods']} pods, {r['rounds']} round(s), {r['host_nodes']} kwok host nodes, a "
        f"slice of {slice_}; seconds, p50 / worst.",
        "",
        "| measure | ours (tenant, on the slice) | floor (host Deployment) | ours / floor (goal ≤ 1.3) |",
        "|---|---:|---:|---:|",
        f"| Deployment 0 → {r['pods']} pods Running | {o['p50']:.1f} / {o['max']:.1f} | {f['p50']:.1f} / "
        f"{f['max']:.1f} | {r['ratio_ours_over_floor']:.2f}× |",
        f"| pods/s (p50) | {o['pods_per_s']:.1f} | {f['pods_per_s']:.1f} | |",
        f"| the slice's host pods all Running (ours) | {r['ours_host_all_running_p50']:.1f} | | |",
        f"| vc-apiserver CPU per pod | {r['vc_apiserver_cpu_ms_per_pod']:.1f} ms "
        f"({r['vc_apiserver_net_cpu_ms_per_pod']:.1f} ms net of a {r['vc_apiserver_idle_cores']:.3f}-core background) "
        "| | |",
        f"| vc-apiserver RSS growth per pod | {r['vc_apiserver_rss_growth_kib_per_pod']:.1f} KiB "
        f"({r['vc_apiserver_rss_mib_after']:.0f} MiB after) | | |",
    ] + ([f"| the syncer during the scale-up (p50) | {r['syncer_passes']:.0f} passes, "
           f"{r['syncer_tenant_status_writes']:.0f} tenant pod status writes | | |"] if "syncer_passes" in r else [])
       + [END])


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.shared [--pods N] [--rounds R] [--docs]``: this family alone (no API suite);
    ``--render results.json`` redraws its block of docs/benchmarks.md from a past run's ``shared``."""
    import argparse

    from . import report
    from .workloads import log

    def flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--pods", type=int, default=500)
        p.add_argument("--rounds", type=int, default=3)

    return report.family_main("shared", __doc__, argv, flags,
                              lambda workdir, args: run(workdir, args.pods, args.rounds, say=log),
                              render, render_markdown, BEGIN, END, ratios=ratios)


if __name__ == "__main__":
    import sys

    sys.exit(main())
