"""A running ``process`` tenant moved to another Kubernetes version, in kube's order: the apiserver, then
the controller-manager and the scheduler (etcd's version is the server's, not the tenant's).

The new apiserver starts beside the old one on the same port (both bind it with SO_REUSEPORT,
:data:`.commands.PORT_SHARING`), and the old one is stopped only once the new one answers ready: the port
always has an apiserver that serves. Whether the new one is ready is asked over one connection that it
answered ``/version`` on with its own version, since the kernel hands each new connection to either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from pathlib import Path

import aiohttp

from apiserver.kubeclient.client import HostError, HostUnavailable
from certs.tenant import TenantPki
from reconciler.runtime.base import UpgradeOutcome
from reconciler.runtime.process.supervisor import Supervisor, last_error
from reconciler.tenantapi import admin_client

__all__ = ["HEALTH_PORTS", "NEXT", "answers_ready_as", "healthy", "roll"]

log = logging.getLogger(__name__)

NEXT = "kube-apiserver-next"  # the new apiserver's pid file and log while both run
PROBE = 0.25  # seconds between looks at a component coming up
HEALTH_PORTS = {"kube-controller-manager": "controller-manager", "kube-scheduler": "scheduler"}


async def roll(supervisor: Supervisor, base: Path, target: dict[str, list[str]], endpoint: str, pki: TenantPki,
               ports: dict[str, int], version: str, timeout: float) -> UpgradeOutcome:
    """Each Kubernetes component whose running command is not ``target``'s, moved to it in order."""
    if _runs(supervisor, base, "kube-apiserver") != target["kube-apiserver"]:
        outcome = await _surge_apiserver(supervisor, base, target["kube-apiserver"], endpoint, pki, version, timeout)
        if not outcome.ok:
            return outcome
    for component, port in HEALTH_PORTS.items():
        if not supervisor.pid(base, component):
            continue  # never started (a scheduler waits for work): it starts at the new version
        if _runs(supervisor, base, component) == target[component]:
            continue  # one that crashed is started again here, at the new version, and must come up
        await supervisor.restart(base, component)
        pid = supervisor.spawn(base, component, target[component])
        if not await healthy(supervisor, base, pid, ports[port], timeout):
            return UpgradeOutcome(False, component, f"{component} {version} did not report healthy within "
                                                    f"{timeout:.0f} s: {last_error(base, component)}", served=True)
    return UpgradeOutcome(True)


def _runs(supervisor: Supervisor, base: Path, component: str) -> list[str] | None:
    pid = supervisor.pid(base, component)
    return supervisor.command_of(pid) if pid and supervisor.alive(pid, base) else None


async def _surge_apiserver(supervisor: Supervisor, base: Path, command: list[str], endpoint: str, pki: TenantPki,
                           version: str, timeout: float) -> UpgradeOutcome:
    """The new apiserver beside the old until it answers ready, then in its place; on failure it goes and the
    old one, which never stopped, goes on serving."""
    pid = supervisor.pid(base, NEXT)
    if not (pid and supervisor.alive(pid, base) and supervisor.command_of(pid) == command):
        await supervisor.restart(base, NEXT)
        pid = supervisor.spawn(base, NEXT, command)
    deadline = time.monotonic() + timeout
    while not await answers_ready_as(endpoint, pki, version):
        if not supervisor.alive(pid, base):
            await supervisor.restart(base, NEXT)
            return UpgradeOutcome(False, "kube-apiserver", f"kube-apiserver {version} exited: "
                                                           f"{last_error(base, NEXT)}")
        if time.monotonic() > deadline:
            why = last_error(base, NEXT)
            await supervisor.restart(base, NEXT)
            return UpgradeOutcome(False, "kube-apiserver", f"kube-apiserver {version} was not ready within "
                                                           f"{timeout:.0f} s{': ' + why if why else ''}")
        await asyncio.sleep(PROBE)
    await supervisor.restart(base, "kube-apiserver")  # the old one: it stops listening, then finishes its requests
    (base / f"{NEXT}.pid").rename(base / "kube-apiserver.pid")
    log.info("tenant apiserver in %s now runs %s", base, version)
    return UpgradeOutcome(True)


async def answers_ready_as(endpoint: str, pki: TenantPki, version: str) -> bool:
    """Whether a fresh connection reached the apiserver of ``version`` and it said it is ready there."""
    client = admin_client(pki, endpoint)
    try:
        if (await client.request("GET", "/version", timeout=2)).get("gitVersion") != version:
            return False
        await client.request("GET", "/readyz", timeout=2, raw=True)
        return (await client.request("GET", "/version", timeout=2)).get("gitVersion") == version
    except (HostError, HostUnavailable):
        return False
    finally:
        await client.close()


async def healthy(supervisor: Supervisor, base: Path, pid: int, port: int, timeout: float) -> bool:
    """A controller-manager's or scheduler's ``/healthz`` (always allowed, served on its secure port)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline and supervisor.alive(pid, base):
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(f"https://127.0.0.1:{port}/healthz", ssl=context,
                                       timeout=aiohttp.ClientTimeout(total=2)) as response:
                    if response.status == 200:
                        return True
            await asyncio.sleep(PROBE)
    return False
