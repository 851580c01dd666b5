"""Promotion benchmark: a host with thousands of kwok nodes, one VirtualCluster asking for hundreds.

Ours: create → ``Completed`` (every promoted node Ready in the tenant) less create → Ready of a
tenant without nodes on the same stack (the control plane's own part), and the time to release
them all on delete, with vc-apiserver's peak RSS. The floor, in the same run: the same host
writes (claim + cordon + taint, one PATCH per node) and tenant Node creations done by a plain
asyncio client at the same concurrency, against that second tenant's control plane.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from hack.harness import fake_node
from hack.stack import Stack, StackPorts
from reconciler.nodes.kwokjoiner import tenant_node
from reconciler.nodes.promoter import PARALLEL
from reconciler.nodes.selection import CLAIM_LABEL

from .controlplane import rss_kib
from .stats import Ratio

GV = "/apis/kosmos.io/v1alpha1"


def vc(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"promotePolicies": [{"labelSelector": {"matchLabels": {"type": "kwok"}}, "nodeCount": count}]}}


async def create_nodes(host: KubeClient, count: int) -> None:
    limit = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with limit:
            node = fake_node(f"bench-{i:05d}", i)
            status = node.pop("status")
            await host.create("/api/v1/nodes", node)
            await host.request("PATCH", f"/api/v1/nodes/bench-{i:05d}/status", body={"status": status},
                               content_type="application/merge-patch+json")
    await asyncio.gather(*(one(i) for i in range(count)))


async def get_vc(client: KubeClient, name: str) -> dict[str, Any]:
    """Like any client: a transient 503/429 (a saturated machine) is retried, not fatal."""
    for _ in range(30):
        try:
            return dict(await client.get(f"{GV}/namespaces/default/virtualclusters/{name}"))
        except HostError as e:
            if e.code not in (429, 503, 504):
                raise
        except HostUnavailable:
            pass
        await asyncio.sleep(1)
    raise TimeoutError(f"{name}: the server kept answering 503")


async def wait_until(client: KubeClient, name: str, done: Callable[[dict[str, Any]], bool], what: str,
                     timeout: float) -> float:
    """Seconds until the VirtualCluster satisfies ``done``."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if done(await get_vc(client, name)):
            return time.perf_counter() - started
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{name}: not {what} after {timeout}s")


async def wait_phase(client: KubeClient, name: str, phase: str, timeout: float) -> float:
    return await wait_until(client, name, lambda o: (o.get("status") or {}).get("phase") == phase, phase, timeout)


async def wait_condition(client: KubeClient, name: str, type_: str, timeout: float) -> float:
    def true(obj: dict[str, Any]) -> bool:
        return any(c.get("type") == type_ and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or [])
    return await wait_until(client, name, true, f"{type_}=True", timeout)


async def floor(host: KubeClient, tenant: KubeClient, nodes: list[dict[str, Any]]) -> float:
    """The same host writes and tenant Node creations, with nothing else around them."""
    limit = asyncio.Semaphore(PARALLEL)

    async def one(node: dict[str, Any]) -> None:
        async with limit:
            name = node["metadata"]["name"]
            while True:  # the claim is guarded by the resourceVersion, like ours: a heartbeat between costs a reread
                try:
                    await host.patch(f"/api/v1/nodes/{name}", {
                        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                     "labels": {CLAIM_LABEL: "default.floor"},
                                     "annotations": {CLAIM_LABEL: "default/floor"}},
                        "spec": {"unschedulable": True, "taints": [
                            {"key": CLAIM_LABEL, "value": "default.floor", "effect": "NoSchedule"}]}})
                    break
                except HostError as e:
                    if e.code != 409:
                        raise
                    node = await host.get(f"/api/v1/nodes/{name}")
            await tenant.create("/api/v1/nodes", tenant_node(node))
    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in nodes))
    elapsed = time.perf_counter() - started
    for node in nodes:  # give them back for the next round
        await host.patch(f"/api/v1/nodes/{node['metadata']['name']}", {
            "metadata": {"labels": {CLAIM_LABEL: None}, "annotations": {CLAIM_LABEL: None}},
            "spec": {"unschedulable": None, "taints": None}})
    return elapsed


async def run(workdir: Path, host_nodes: int = 5000, wanted: int = 500) -> dict[str, Any]:
    stack = Stack(workdir, StackPorts.free(), runtime="process")
    await asyncio.to_thread(stack.up, 0)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            if stack.api.proc is not None and stack.api.proc.pid:
                peak[0] = max(peak[0], rss_kib(stack.api.proc.pid))
            time.sleep(0.2)
    sampler = threading.Thread(target=sample, daemon=True)
    host = KubeClient.from_kubeconfig(stack.kubeconfig, timeout=60)
    try:
        started = time.perf_counter()
        await create_nodes(host, host_nodes)
        setup = time.perf_counter() - started
        sampler.start()
        await host.create(f"{GV}/namespaces/default/virtualclusters", vc("many", wanted))
        control_plane = await wait_condition(host, "many", "ControlPlaneReady", 600)
        completed = control_plane + await wait_phase(host, "many", "Completed", 3600)
        claimed = [n for n in (await host.get("/api/v1/nodes")).get("items", [])
                   if n["metadata"].get("labels", {}).get(CLAIM_LABEL) == "default.many"]
        started = time.perf_counter()
        await host.delete(f"{GV}/namespaces/default/virtualclusters/many")
        while True:
            try:
                await host.get(f"{GV}/namespaces/default/virtualclusters/many")
            except Exception:  # gone: every node was returned first
                break
            await asyncio.sleep(0.5)
        released = time.perf_counter() - started
        stop.set()
        # The floor needs a tenant apiserver too: one more VirtualCluster without nodes. Its create → Ready is
        # also where ours' promotion starts: the pass that first finds a control plane ready promotes before it
        # writes the status, so the 500-node tenant's ControlPlaneReady shows only after its first claims.
        await host.create(f"{GV}/namespaces/default/virtualclusters", vc("floor", 0))
        alone = await wait_phase(host, "floor", "Completed", 300)
        raw = await host.get(f"{GV}/namespaces/default/virtualclusters/floor/kubeconfig")
        path = workdir / "floor.kubeconfig"
        path.write_text(json.dumps(raw))
        tenant = KubeClient.from_kubeconfig(path, timeout=60)
        free = [n for n in (await host.get("/api/v1/nodes", labelSelector="type=kwok")).get("items", [])
                if not n["metadata"].get("labels", {}).get(CLAIM_LABEL)][:wanted]
        floor_s = await floor(host, tenant, free)
        await tenant.close()
    finally:
        stop.set()
        await host.close()
        await asyncio.to_thread(stack.down)
    promotion = completed - alone
    return {"host_nodes": host_nodes, "wanted": wanted, "promoted": len(claimed), "node_setup_s": setup,
            "ours_create_to_completed_s": completed, "ours_control_plane_ready_s": control_plane,
            "control_plane_alone_s": alone, "ours_promotion_s": promotion, "floor_writes_s": floor_s,
            "ratio_ours_over_floor": promotion / floor_s, "release_all_s": released,
            "vc_apiserver_peak_rss_mib": peak[0] / 1024, "concurrency": PARALLEL}


def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bar: the floor's writes / ours (> 1: ours is faster); the goal ours/floor ≤ 1.5 turned alike."""
    return [(f"promotion of {r['wanted']} of {r['host_nodes']:,} nodes", 1 / r["ratio_ours_over_floor"], 1 / 1.5)]


def render(r: dict[str, Any]) -> str:
    return "\n".join([
        f"promotion ({r['host_nodes']} host nodes, {r['wanted']} wanted)   ours      floor     ours/floor (goal <= 1.5)",
        f"  create -> Completed               {r['ours_create_to_completed_s']:7.1f}s"
        f"  (ControlPlaneReady written after {r['ours_control_plane_ready_s']:.1f}s, with the first claims)",
        *([f"  a tenant without nodes: create -> Completed  {r['control_plane_alone_s']:.1f}s"]
          if "control_plane_alone_s" in r else []),
        f"  promotion (the difference)        {r['ours_promotion_s']:7.1f}s  {r['floor_writes_s']:7.1f}s  "
        f"{r['ratio_ours_over_floor']:.2f}",
        f"  release all on delete             {r['release_all_s']:7.1f}s",
        f"  vc-apiserver peak RSS             {r['vc_apiserver_peak_rss_mib']:7.0f} MiB",
    ])


if __name__ == "__main__":
    import sys
    import tempfile

    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    want = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    result = asyncio.run(run(Path(tempfile.mkdtemp(prefix="vc-promo-")), nodes, want))
    print(render(result))
    print(json.dumps(result, indent=2))
