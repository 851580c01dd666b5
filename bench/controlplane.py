"""Control-plane benchmark: VirtualCluster create → Ready against the floor, as distributions.

The floor is the same components started directly with the same flags (the process
runtime's own command lines and PKI layout) until the tenant apiserver's ``/readyz``
answers and the controller-manager runs: the tenants here ask for no compute, so ours
starts no scheduler either (:mod:`reconciler.runtime.scheduling`). Ours is the whole
product path: POST the VirtualCluster, the reconciler builds the PKI, stores it
encrypted, starts the components, bootstraps the tenant, and writes ``Ready``.

Two distributions, each reported as p50 and p99 beside the floor's:

- sequential: N rounds, one of ours then one floor, so drift hits both;
- at once: M of ours created together, then M floors started together, each one's time
  from its own start, so both pay the same contention of M control planes starting.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from apiserver.storage.secrets import generate_key_file
from certs import tenant as tenantpki
from hack.harness import BIN, ApiServer, Etcd, Pki, free_port
from reconciler.runtime.process import COMPONENTS, ProcessRuntime
from reconciler.runtime.process.commands import commands, write_files
from reconciler.versions import KUBERNETES_VERSION

from .stats import Ratio, percentile

POLL = 0.05
FLOORS = "floor"  # the namespace-like directory floors are claimed under in their runtime
# Below the kernel's ephemeral ports (32768 up, here), apart from ours' 20000-29999: a floor's port taken by
# an outgoing connection stops its etcd from starting (a run once waited on such a floor for half an hour).
FLOOR_PORTS = (10000, 19999)
FLOOR_TIMEOUT = 120.0  # seconds: a floor ready in a few (docs/benchmarks.md) that is not by then has failed
BEGIN, END = "<!-- bench:controlplane:begin -->", "<!-- bench:controlplane:end -->"


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


def admin_session(pki_files: Pki, api: ApiServer) -> aiohttp.ClientSession:
    """The bench's own admin, straight at a standalone vc-apiserver (client certificate, no host)."""
    return aiohttp.ClientSession(base_url=api.url, connector=aiohttp.TCPConnector(ssl=pki_files.ssl_context("admin")))


def vc(name: str) -> dict[str, Any]:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": "bench"}, "spec": {}}


@dataclass
class Ours:
    api: ApiServer
    session: aiohttp.ClientSession

    async def create_until_ready(self, name: str, spec: dict[str, Any] | None = None) -> float:
        started = time.perf_counter()
        base = "/apis/kosmos.io/v1alpha1/namespaces/bench/virtualclusters"
        async with self.session.post(base, json={**vc(name), "spec": spec or {}}) as r:
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


def floor_claim(runtime: ProcessRuntime, name: str) -> tuple[Path, dict[str, int]]:
    """A floor's directory and ports, recorded in its ``state.json`` at once: ``allocate_ports`` skips
    the ports in the others' ``state.json``, so floors claimed one after another never share one."""
    base = runtime.dir(FLOORS, name)
    base.mkdir(parents=True, exist_ok=True)
    ports = runtime.layout.allocate_ports("127.0.0.1")
    (base / "state.json").write_text(json.dumps({"ports": ports}))
    return base, ports


async def floor_start(runtime: ProcessRuntime, pki: tenantpki.TenantPki, base: Path, ports: dict[str, int],
                      version: str = KUBERNETES_VERSION) -> float:
    """Start the components of a claimed floor directly, at Kubernetes ``version``; seconds until ready."""
    endpoint = f"https://127.0.0.1:{ports['apiserver']}"
    write_files(base, pki, endpoint)
    command_lines = commands(runtime.bin_dir, base, ports, "127.0.0.1", runtime.tuning, pki.service_cidr, version)
    started = time.perf_counter()
    # The minimal correct order (the controller-manager exits if started before the apiserver has
    # bootstrapped RBAC): etcd + apiserver, then the controller-manager as soon as /readyz answers.
    for c in ("etcd", "kube-apiserver"):
        runtime.spawn(base, c, command_lines[c])
    while not await runtime.readyz(FLOORS, base.name, endpoint, pki):  # polled as ours is measured
        dead = [c for c in ("etcd", "kube-apiserver") if not runtime.alive(runtime.pid(base, c), base)]
        if dead or time.perf_counter() - started > FLOOR_TIMEOUT:
            why = f"{' and '.join(dead)} exited" if dead else f"not ready after {FLOOR_TIMEOUT:.0f} s"
            raise RuntimeError(f"floor control plane {base.name}: {why} (logs in {base / 'logs'})")
        await asyncio.sleep(POLL)
    runtime.spawn(base, "kube-controller-manager", command_lines["kube-controller-manager"])
    return time.perf_counter() - started


async def start_floors(runtime: ProcessRuntime, pki: tenantpki.TenantPki, names: list[str]) -> list[float]:
    """Start one floor per name, all together (claimed one after another first); each one's seconds
    until ready. All stay up until the last is ready, as ours do, and are then torn down."""
    claims = [floor_claim(runtime, name) for name in names]
    try:
        return list(await asyncio.gather(*(floor_start(runtime, pki, *claim) for claim in claims)))
    finally:
        await asyncio.gather(*(runtime.teardown(FLOORS, name) for name in names))


def distribution(ours: list[float], floor: list[float]) -> dict[str, Any]:
    """p50 and p99 of each side and their ratios ours/floor (> 1: ours is slower)."""
    out: dict[str, Any] = {side: {"p50": percentile(v, 50), "p99": percentile(v, 99), "n": len(v), "max": max(v)}
                           for side, v in (("ours", ours), ("floor", floor))}
    for q in ("p50", "p99"):
        out[f"ratio_{q}"] = out["ours"][q] / out["floor"][q]
    return out


async def run(workdir: Path, rounds: int = 20, concurrent: int = 10) -> dict[str, Any]:
    """create → Ready (ours) and start → ready (floor): ``rounds`` alternating one at a time, then
    ``concurrent`` of each at once; and one tenant's RSS."""
    pki_files, etcd, api = start_standalone(workdir, "--concurrent-reconciles", str(concurrent))
    floor_runtime = ProcessRuntime(workdir / "floor", BIN, FLOOR_PORTS)
    pki = await asyncio.to_thread(tenantpki.generate, tenantpki.apiserver_sans("127.0.0.1", [], "10.96.0.1"))
    ours_times: list[float] = []
    floor_times: list[float] = []
    tenant_rss = 0
    try:
        async with admin_session(pki_files, api) as session:
            ours = Ours(api, session)
            for i in range(rounds):
                ours_times.append(await ours.create_until_ready(f"cp-{i}"))
                if i == 0:
                    tenant_dir = workdir / "tenants" / "bench" / "cp-0"
                    tenant_rss = sum(rss_kib(int((tenant_dir / f"{c}.pid").read_text())) for c in COMPONENTS
                                     if (tenant_dir / f"{c}.pid").exists())
                await ours.delete(f"cp-{i}")
                floor_times += await start_floors(floor_runtime, pki, [f"f{i}"])
            started = time.perf_counter()
            times = await asyncio.gather(*(ours.create_until_ready(f"many-{i}") for i in range(concurrent)))
            all_ready = time.perf_counter() - started
            await asyncio.gather(*(ours.delete(f"many-{i}") for i in range(concurrent)))
            floor_many = await start_floors(floor_runtime, pki, [f"many-{i}" for i in range(concurrent)])
    finally:
        api.stop()
        etcd.stop()
        shutil.rmtree(workdir / "floor", ignore_errors=True)
    sequential = distribution(ours_times, floor_times)
    return {
        "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "rounds": rounds,
        "ours_create_to_ready_s": ours_times, "floor_start_to_ready_s": floor_times,
        "sequential": sequential, "at_once": distribution(times, floor_many),
        # the sequential p50s under the names earlier results have; ratio_ours_over_floor is every family's headline
        "ours_median_s": sequential["ours"]["p50"], "floor_median_s": sequential["floor"]["p50"],
        "ratio_ours_over_floor": sequential["ratio_p50"],
        "concurrent": concurrent, "concurrent_all_ready_s": all_ready, "concurrent_each_s": sorted(times),
        "floor_concurrent_each_s": sorted(floor_many), "tenant_rss_mib": tenant_rss / 1024,
    }


def _rows(r: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"one at a time, {r['rounds']} rounds", r["sequential"]), (f"{r['concurrent']} at once", r["at_once"])]


def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bars: floor / ours (> 1: ours is faster), the goal p99 ours/floor ≤ 1.2 turned the same way."""
    return [(f"control plane create → Ready, {label} {q}", 1 / d[f"ratio_{q}"], 1 / 1.2 if q == "p99" else None)
            for label, d in _rows(r) for q in ("p50", "p99")]


def render(r: dict[str, Any]) -> str:
    lines = ["control plane (process runtime), create -> Ready; seconds, p50 / p99; ours/floor goal p99 <= 1.2"]
    for label, d in _rows(r):
        o, f = d["ours"], d["floor"]
        lines.append(f"  {label:<24} ours {o['p50']:6.2f} / {o['p99']:6.2f}   floor {f['p50']:6.2f} / {f['p99']:6.2f}"
                     f"   ours/floor {d['ratio_p50']:.2f} / {d['ratio_p99']:.2f}")
    lines += [f"  {r['concurrent']} VirtualClusters at once, all Ready  {r['concurrent_all_ready_s']:6.2f}s",
              f"  RSS of one tenant control plane        {r['tenant_rss_mib']:6.0f} MiB"]
    return "\n".join(lines)


def render_markdown(r: dict[str, Any]) -> str:
    rows = [f"| {label} | {d['ours']['p50']:.2f} / {d['ours']['p99']:.2f} | {d['floor']['p50']:.2f} / "
            f"{d['floor']['p99']:.2f} | {d['ratio_p50']:.2f}× | **{d['ratio_p99']:.2f}×** |" for label, d in _rows(r)]
    return "\n".join([
        BEGIN,
        f"Measured {r['measured']}: process runtime, {r['rounds']} rounds one at a time (ours, then the floor) and "
        f"{r['concurrent']} of each at once; create → Ready in seconds, p50 / p99. {r['concurrent']} of ours were all "
        f"Ready in {r['concurrent_all_ready_s']:.1f} s; one tenant control plane's RSS at Ready was "
        f"{r['tenant_rss_mib']:.0f} MiB.",
        "",
        "| create → Ready | ours p50 / p99 | floor p50 / p99 | ours / floor p50 | ours / floor p99 (goal ≤ 1.2) |",
        "|---|---:|---:|---:|---:|",
        *rows,
        END,
    ])


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.controlplane [--rounds N] [--concurrent M] [--docs]``: this family alone (no API
    suite); ``--render results.json`` redraws its block of docs/benchmarks.md from a past run's ``controlplane``."""
    import argparse

    from . import report

    def flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--rounds", type=int, default=20, help="create -> Ready rounds one at a time, ours then the floor")
        p.add_argument("--concurrent", type=int, default=10, help="of ours, then of the floor, started at once")

    return report.family_main("controlplane", __doc__, argv, flags,
                              lambda workdir, args: run(workdir, args.rounds, args.concurrent),
                              render, render_markdown, BEGIN, END, json_flag=True, ratios=ratios)


if __name__ == "__main__":
    import sys

    sys.exit(main())
