"""Hibernation benchmark: hibernate time, wake → Ready against create → Ready, host memory freed.

Each round creates a VirtualCluster (process runtime) and waits for Ready, writes a ConfigMap into
the tenant, records the resident memory of every process of the tenant, sets
``spec.hibernation.hibernated`` and times until the phase is ``Hibernated`` (every process
stopped, the etcd data kept), then sets it back and times until ``Ready`` again, and checks the
ConfigMap is still there. What hibernation frees is the resident memory the tenant's processes
held; what it keeps is the tenant's directory on disk (etcd data, PKI, logs).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from apiserver.kubeclient.client import KubeClient, access_from_pem
from reconciler.runtime.process.supervisor import processes_under

from .controlplane import POLL, Ours, admin_session, rss_kib, start_standalone
from .stats import Ratio

BASE = "/apis/kosmos.io/v1alpha1/namespaces/bench/virtualclusters"


def du_kib(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) // 1024


async def _status(session: aiohttp.ClientSession, name: str) -> dict[str, Any]:
    async with session.get(f"{BASE}/{name}") as r:
        return (await r.json()).get("status") or {}


async def _hibernated(session: aiohttp.ClientSession, name: str, value: bool) -> None:
    body = {"spec": {"hibernation": {"hibernated": value}}}
    async with session.patch(f"{BASE}/{name}", data=json.dumps(body),
                             headers={"Content-Type": "application/merge-patch+json"}) as r:
        assert r.status == 200, await r.text()


async def _until(session: aiohttp.ClientSession, name: str, done: Any) -> float:
    started = time.perf_counter()
    while True:  # polled as controlplane.py polls create -> Ready
        if done(await _status(session, name)):
            return time.perf_counter() - started
        await asyncio.sleep(POLL)


def _ready(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


async def _tenant(session: aiohttp.ClientSession, name: str) -> KubeClient:
    async with session.get(f"{BASE}/{name}/kubeconfig") as r:
        config = await r.json()
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    return KubeClient(access_from_pem(cluster["server"], base64.b64decode(cluster["certificate-authority-data"]),
                                      base64.b64decode(user["client-certificate-data"]),
                                      base64.b64decode(user["client-key-data"])))


async def run(workdir: Path, rounds: int = 3) -> dict[str, Any]:
    pki_files, etcd, api = start_standalone(workdir)
    tenants = workdir / "tenants"
    create, hibernate, wake, freed, kept = [], [], [], [], []
    try:
        async with admin_session(pki_files, api) as session:
            ours = Ours(api, session)
            for i in range(rounds):
                name = f"hib-{i}"
                create.append(await ours.create_until_ready(name))
                tenant = await _tenant(session, name)
                try:
                    await tenant.create("/api/v1/namespaces/default/configmaps", {
                        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}, "data": {"k": "v"}})
                    base = tenants / "bench" / name
                    freed.append(sum(rss_kib(pid) for pid in processes_under(base)))
                    await _hibernated(session, name, True)
                    hibernate.append(await _until(session, name, lambda s: s.get("phase") == "Hibernated"))
                    assert not processes_under(base), "a hibernated tenant runs nothing"
                    kept.append(du_kib(base))
                    await _hibernated(session, name, False)
                    wake.append(await _until(session, name, _ready))
                    kept_map = await tenant.get("/api/v1/namespaces/default/configmaps/kept")
                    assert kept_map["data"] == {"k": "v"}, kept_map
                finally:
                    await tenant.close()
                await ours.delete(name)
    finally:
        api.stop()
        etcd.stop()
        shutil.rmtree(tenants, ignore_errors=True)
    return {
        "create_to_ready_s": create, "hibernate_s": hibernate, "wake_to_ready_s": wake,
        "create_median_s": statistics.median(create), "hibernate_median_s": statistics.median(hibernate),
        "wake_median_s": statistics.median(wake),
        "ratio_wake_over_create": statistics.median(wake) / statistics.median(create),
        "freed_rss_mib": statistics.median(freed) / 1024, "kept_on_disk_mib": statistics.median(kept) / 1024,
    }


def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bar: create → Ready / wake → Ready (> 1: a wake is faster than a first start)."""
    return [("wake → Ready against create → Ready", 1 / r["ratio_wake_over_create"], None)]


def render(result: dict[str, Any]) -> str:
    n = len(result["hibernate_s"])
    return "\n".join([
        f"hibernation (process runtime), median of {n}",
        f"  create -> Ready                          {result['create_median_s']:6.2f}s",
        f"  hibernate (spec set -> Hibernated)       {result['hibernate_median_s']:6.2f}s",
        f"  wake -> Ready                            {result['wake_median_s']:6.2f}s   "
        f"({result['ratio_wake_over_create']:.2f} of create -> Ready)",
        f"  host memory freed per hibernated tenant  {result['freed_rss_mib']:6.0f} MiB RSS "
        f"(kept on disk: {result['kept_on_disk_mib']:.0f} MiB)",
    ])


if __name__ == "__main__":
    import sys
    import tempfile

    out = asyncio.run(run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="vc-hib-")),
                          rounds=int(sys.argv[2]) if len(sys.argv) > 2 else 3))
    print(render(out))
    print(json.dumps(out, indent=2))
