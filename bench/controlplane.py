"""Control-plane benchmark: VirtualCluster create → Ready against the floor.

The floor is the same four components started directly with the same flags (the
process runtime's own command lines and PKI layout) until the tenant apiserver's
``/readyz`` answers and the controller-manager and scheduler run. Ours is the whole
product path: POST the VirtualCluster, the reconciler builds the PKI, stores it
encrypted, starts the components, bootstraps the tenant, and writes ``Ready``.
Rounds alternate ours/floor so drift hits both.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from apiserver.storage.secrets import generate_key_file
from certs import tenant as tenantpki
from hack.harness import BIN, ApiServer, Etcd, Pki, free_port
from reconciler.runtime.process import COMPONENTS, ProcessRuntime

POLL = 0.05


def proc_kib(pid: int, file: str = "status", field: str = "VmRSS") -> int:
    """One KiB figure of a process from /proc (VmRSS by default); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(pid: int) -> int:
    return proc_kib(pid)


def start_standalone(workdir: Path, *extra: str) -> tuple[Pki, Etcd, ApiServer]:
    """vc-apiserver on its own etcd, building tenant control planes as processes under
    ``workdir/tenants`` (the product families that need no host)."""
    workdir.mkdir(parents=True, exist_ok=True)
    pki_files = Pki.ensure(workdir / "pki")
    etcd = Etcd(workdir / "etcd", free_port(), free_port(), workdir / "etcd.log").start()
    key = workdir / "encryption.key"
    if not key.exists():
        generate_key_file(key)
    api = ApiServer(pki_files, etcd.url, free_port(), workdir / "vc-apiserver.log", extra_args=[
        "--control-plane-runtime", "process", "--runtime-dir", str(workdir / "tenants"), "--runtime-bin-dir",
        str(BIN), "--encryption-key-file", str(key), *extra]).start()
    return pki_files, etcd, api


def vc(name: str) -> dict[str, Any]:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": "bench"}, "spec": {}}


@dataclass
class Ours:
    api: ApiServer
    session: aiohttp.ClientSession

    async def create_until_ready(self, name: str) -> float:
        started = time.perf_counter()
        base = "/apis/kosmos.io/v1alpha1/namespaces/bench/virtualclusters"
        async with self.session.post(base, json=vc(name)) as r:
            assert r.status == 201, await r.text()
        while True:
            async with self.session.get(f"{base}/{name}") as r:
                status = (await r.json()).get("status") or {}
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
                return time.perf_counter() - started
            await asyncio.sleep(POLL)

    async def delete(self, name: str) -> None:
        base = "/apis/kosmos.io/v1alpha1/namespaces/bench/virtualclusters"
        async with self.session.delete(f"{base}/{name}") as r:
            assert r.status in (200, 404)
        while True:
            async with self.session.get(f"{base}/{name}") as r:
                if r.status == 404:
                    return
            await asyncio.sleep(0.1)


async def floor_once(runtime: ProcessRuntime, pki: tenantpki.TenantPki, name: str) -> tuple[float, int]:
    """Start the four components directly; seconds until ready, and their RSS then (KiB)."""
    base = runtime.dir("floor", name)
    base.mkdir(parents=True, exist_ok=True)
    ports = runtime.allocate_ports("127.0.0.1")
    (base / "state.json").write_text(json.dumps({"ports": ports}))
    endpoint = f"https://127.0.0.1:{ports['apiserver']}"
    runtime.write_files(base, pki, endpoint)
    commands = runtime.commands(base, ports, "127.0.0.1")
    started = time.perf_counter()
    # The minimal correct order (the controller-manager exits if started before the apiserver has
    # bootstrapped RBAC): etcd + apiserver, then the other two as soon as /readyz answers.
    pids = [runtime.spawn(base, c, commands[c]) for c in ("etcd", "kube-apiserver")]
    while True:  # polled at the same granularity as ours is measured
        if await runtime.readyz(base, endpoint, pki):
            break
        await asyncio.sleep(POLL)
    pids += [runtime.spawn(base, c, commands[c]) for c in ("kube-controller-manager", "kube-scheduler")]
    elapsed = time.perf_counter() - started
    rss = sum(rss_kib(p) for p in pids)
    await runtime.teardown("floor", name)
    return elapsed, rss


async def run(workdir: Path, rounds: int = 3, concurrent: int = 5) -> dict[str, Any]:
    """Medians of create → Ready (ours) and start → ready (floor), N at once, and one tenant's RSS."""
    pki_files, etcd, api = start_standalone(workdir, "--concurrent-reconciles", str(concurrent))
    floor_runtime = ProcessRuntime(workdir / "floor", BIN, (30000, 34999))
    pki = await asyncio.to_thread(tenantpki.generate, tenantpki.apiserver_sans("127.0.0.1", [], "10.96.0.1"))
    ours_times: list[float] = []
    floor_times: list[float] = []
    tenant_rss = 0
    try:
        async with aiohttp.ClientSession(base_url=api.url, connector=aiohttp.TCPConnector(
                ssl=pki_files.ssl_context("admin"))) as session:
            ours = Ours(api, session)
            for i in range(rounds):
                ours_times.append(await ours.create_until_ready(f"cp-{i}"))
                if i == 0:
                    tenant_dir = workdir / "tenants" / "bench" / "cp-0"
                    tenant_rss = sum(rss_kib(int((tenant_dir / f"{c}.pid").read_text())) for c in COMPONENTS)
                await ours.delete(f"cp-{i}")
                elapsed, _ = await floor_once(floor_runtime, pki, f"f{i}")
                floor_times.append(elapsed)
            started = time.perf_counter()
            times = await asyncio.gather(*(ours.create_until_ready(f"many-{i}") for i in range(concurrent)))
            all_ready = time.perf_counter() - started
            await asyncio.gather(*(ours.delete(f"many-{i}") for i in range(concurrent)))
    finally:
        api.stop()
        etcd.stop()
        shutil.rmtree(workdir / "floor", ignore_errors=True)
    ours_median, floor_median = statistics.median(ours_times), statistics.median(floor_times)
    return {
        "ours_create_to_ready_s": ours_times, "floor_start_to_ready_s": floor_times,
        "ours_median_s": ours_median, "floor_median_s": floor_median,
        "ratio_ours_over_floor": ours_median / floor_median,
        "concurrent": concurrent, "concurrent_all_ready_s": all_ready,
        "concurrent_each_s": sorted(times), "tenant_rss_mib": tenant_rss / 1024,
    }


def render(result: dict[str, Any]) -> str:
    return "\n".join([
        "control plane (process runtime)          ours      floor     ours/floor (goal <= 1.2)",
        f"  create -> Ready, median of {len(result['ours_create_to_ready_s'])}       "
        f"{result['ours_median_s']:6.2f}s   {result['floor_median_s']:6.2f}s   {result['ratio_ours_over_floor']:.2f}",
        f"  {result['concurrent']} VirtualClusters at once, all Ready  {result['concurrent_all_ready_s']:6.2f}s",
        f"  RSS of one tenant control plane        {result['tenant_rss_mib']:6.0f} MiB",
    ])


if __name__ == "__main__":
    import sys
    import tempfile

    out = asyncio.run(run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="vc-cp-"))))
    print(render(out))
    print(json.dumps(out, indent=2))
