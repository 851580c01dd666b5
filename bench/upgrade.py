"""Upgrade benchmark (process runtime): a tenant moved one minor up in place under a steady client load.

Ours: a VirtualCluster created at the older version, four readers and a writer on its apiserver
(:mod:`hack.steadyload`, counting failures as client-go sees them), then ``spec.kubernetesVersion`` patched;
timed until ``status.upgrade`` says Succeeded (the pre-upgrade snapshot, then the apiserver's surge beside the
old one on the shared port, then the controller-manager).

The floor: what an operator does by hand with the same binaries and flags, kubeadm's way: the same four
components started at the older version without vc-apiserver, then each replaced in place at the newer one
(the apiserver stopped, the new one started and waited for, then the controller-manager), under the same load,
timed from the first stop until the new apiserver and controller-manager answer. No snapshot is taken there.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from certs import tenant as tenantpki
from hack.harness import BIN
from hack.steadyload import Load, LoadResult
from reconciler.runtime.process import ProcessRuntime
from reconciler.runtime.process.commands import commands
from reconciler.runtime.process.upgrade import HEALTH_PORTS, answers_ready_as, healthy
from reconciler.versions import KUBERNETES_VERSIONS

from .controlplane import (
    FLOOR_PORTS,
    FLOORS,
    POLL,
    Ours,
    admin_session,
    floor_claim,
    floor_start,
    start_standalone,
)
from .stats import Ratio

NEWEST, OLDER = KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[1]
BASE = "/apis/kosmos.io/v1alpha1/namespaces/bench/virtualclusters"
SETTLE = 2.0  # seconds of load before and after an upgrade


async def _ours(ours: Ours, workdir: Path, name: str) -> tuple[float, LoadResult]:
    session = ours.session
    await ours.create_until_ready(name, {"kubernetesVersion": OLDER})
    load = Load.of_kubeconfig(workdir / "tenants" / "bench" / name / "admin.kubeconfig")
    await load.make_target()
    await load.start()
    await asyncio.sleep(SETTLE)
    started = time.perf_counter()
    async with session.patch(f"{BASE}/{name}", data=json.dumps({"spec": {"kubernetesVersion": NEWEST}}),
                             headers={"Content-Type": "application/merge-patch+json"}) as r:
        assert r.status == 200, await r.text()
    while True:
        async with session.get(f"{BASE}/{name}") as r:
            upgrade = ((await r.json()).get("status") or {}).get("upgrade") or {}
        if upgrade.get("state") == "Succeeded":
            break
        if upgrade.get("state") == "RolledBack":
            raise RuntimeError(f"the upgrade of {name} rolled back: {upgrade.get('message')}")
        await asyncio.sleep(POLL)
    took = time.perf_counter() - started
    await asyncio.sleep(SETTLE)
    result = await load.stop()
    await ours.delete(name)
    return took, result


async def _floor(runtime: ProcessRuntime, pki: tenantpki.TenantPki, name: str) -> tuple[float, LoadResult]:
    base, ports = floor_claim(runtime, name)
    endpoint = f"https://127.0.0.1:{ports['apiserver']}"
    try:
        await floor_start(runtime, pki, base, ports, OLDER)
        new = commands(runtime.bin_dir, base, ports, "127.0.0.1", runtime.tuning, pki.service_cidr, NEWEST)
        load = Load.of_kubeconfig(base / "admin.kubeconfig")
        await load.make_target()
        await load.start()
        await asyncio.sleep(SETTLE)
        started = time.perf_counter()
        await runtime.supervisor.restart(base, "kube-apiserver")
        runtime.spawn(base, "kube-apiserver", new["kube-apiserver"])
        deadline = time.perf_counter() + 120
        while not await answers_ready_as(endpoint, pki, NEWEST):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"floor {name}: kube-apiserver {NEWEST} not ready within 120 s")
            await asyncio.sleep(POLL)
        await runtime.supervisor.restart(base, "kube-controller-manager")
        pid = runtime.spawn(base, "kube-controller-manager", new["kube-controller-manager"])
        if not await healthy(runtime.supervisor, base, pid, ports[HEALTH_PORTS["kube-controller-manager"]], 60):
            raise RuntimeError(f"floor {name}: the controller-manager {NEWEST} did not come up")
        took = time.perf_counter() - started
        await asyncio.sleep(SETTLE)
        return took, await load.stop()
    finally:
        await runtime.teardown(FLOORS, name)


async def run(workdir: Path, rounds: int = 3) -> dict[str, Any]:
    """``rounds`` upgrades of ours and of the floor, alternating."""
    pki_files, etcd, api = start_standalone(workdir)
    floor_runtime = ProcessRuntime(workdir / "floor", BIN, FLOOR_PORTS)
    pki = await asyncio.to_thread(tenantpki.generate, tenantpki.apiserver_sans("127.0.0.1", [], "10.96.0.1"))
    ours_runs: list[tuple[float, LoadResult]] = []
    floor_runs: list[tuple[float, LoadResult]] = []
    try:
        async with admin_session(pki_files, api) as session:
            ours = Ours(api, session)
            for i in range(rounds):
                ours_runs.append(await _ours(ours, workdir, f"up-{i}"))
                floor_runs.append(await _floor(floor_runtime, pki, f"up-{i}"))
    finally:
        api.stop()
        etcd.stop()
        shutil.rmtree(workdir / "floor", ignore_errors=True)
    return {"from": OLDER, "to": NEWEST, "rounds": rounds, "ours": _side(ours_runs), "floor": _side(floor_runs),
            "ratio_duration": statistics.median(t for t, _ in ours_runs) / statistics.median(t for t, _ in floor_runs)}


def _side(runs: list[tuple[float, LoadResult]]) -> dict[str, Any]:
    results = [r for _, r in runs]
    return {"seconds": [round(t, 2) for t, _ in runs], "median_s": round(statistics.median(t for t, _ in runs), 2),
            "reads": sum(r.reads for r in results), "reads_failed": sum(r.reads_failed for r in results),
            "reads_failed_first": sum(r.reads_failed_first for r in results),
            "writes": sum(r.writes for r in results), "writes_failed": sum(r.writes_failed for r in results),
            "writes_lost": sum(r.writes_lost for r in results)}


def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bar: the floor's duration over ours (> 1: ours is faster)."""
    return [("upgrade one minor, duration, against stop-and-start by hand", 1 / r["ratio_duration"], None)]


def render(result: dict[str, Any]) -> str:
    o, f = result["ours"], result["floor"]

    def line(side: str, s: dict[str, Any]) -> str:
        return (f"  {side:38} {s['median_s']:6.2f}s   reads failed {s['reads_failed']}/{s['reads']} "
                f"(first attempt {s['reads_failed_first']}), writes failed {s['writes_failed']}/{s['writes']}, "
                f"lost {s['writes_lost']}")
    return "\n".join([
        f"upgrade {result['from']} -> {result['to']} under load (process runtime), median of {result['rounds']}",
        line("ours (snapshot, surge, kcm)", o),
        line("floor (stop and start each, by hand)", f),
        f"  duration ours / floor {result['ratio_duration']:.2f}",
    ])
