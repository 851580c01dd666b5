"""The ``process`` runtime: a tenant control plane as local processes, three or four.

Each tenant gets a directory (:mod:`.layout`) and its processes (:mod:`.supervisor`) — etcd,
kube-apiserver, kube-controller-manager, and kube-scheduler once it has something to schedule
(:mod:`reconciler.runtime.scheduling`). A pass over a ready tenant rewrites its files (:mod:`.commands`)
only when its PKI or address changed, and in full every ``rewrite_after`` seconds, which undoes a change
made to them by hand.

Hibernation stops the processes (politely, etcd last) and keeps the directory: ``ensure`` starts them
again on the same ports from the same data. The apiserver's audit log of user requests
(:mod:`reconciler.runtime.audit`) is ``logs/audit.log``. Snapshots are files beside the tenants
(:mod:`.backups`).

This module holds the runtime's contract and the memory kept between passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from apiserver.kubeclient.client import HostError, HostUnavailable
from certs.tenant import TenantPki
from reconciler.backup.snapshots import Snapshot, SnapshotStore
from reconciler.runtime import audit
from reconciler.runtime.authz import TenantAuthorizationWebhook
from reconciler.runtime.base import ControlPlaneState, Obj, RuntimeFailure, UpgradeOutcome
from reconciler.runtime.passmemo import PassMemo
from reconciler.runtime.process import upgrade
from reconciler.runtime.process.backups import Backups
from reconciler.runtime.process.commands import READ_AT_START, commands, started_from, write_files
from reconciler.runtime.process.layout import Layout, listen_address
from reconciler.runtime.process.supervisor import Supervisor, process_usage
from reconciler.runtime.scheduling import Scheduling
from reconciler.runtime.tuning import LEAN, TenantTuning
from reconciler.tenantapi import TenantClients
from reconciler.versions import KUBERNETES_VERSION

__all__ = ["ProcessRuntime"]

ASIDE = "etcd.before-rollback"  # the data a rollback's restore replaces, for the moment of the swap
REWRITE_AFTER = 60.0  # seconds a tenant's files, written unchanged, are trusted before a full pass again
AUDIT_TAIL = 64 * 1024  # bytes read from the end of the audit log to find its last event


@dataclass
class ProcessRuntime:
    """Tenant control planes under ``root``, with ports from ``port_range``."""

    root: Path
    bin_dir: Path
    port_range: tuple[int, int] = (20000, 29999)  # below the kernel's ephemeral ports
    snapshot_dir: Path | None = None  # where tenants' snapshots are kept; default: snapshots beside root
    tuning: TenantTuning = LEAN
    webhook: TenantAuthorizationWebhook | None = None  # vc-apiserver's credential webhook, as tenants reach it
    name: str = "process"
    REPLACES_IN_PLACE: ClassVar[bool] = True
    WAKE_ESTIMATE: ClassVar[int] = 10  # wake -> Ready measured 3.5 s alone on 2 cores (docs/benchmarks.md)
    clients: TenantClients = field(default_factory=TenantClients)
    rewrite_after: float = REWRITE_AFTER
    scheduling: Scheduling = field(default_factory=Scheduling)
    _written: PassMemo[bool] = field(default_factory=PassMemo)  # by tenant: the PKI digest and URL last written
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _versions: dict[tuple[str, str], str] = field(default_factory=dict)  # by tenant: what the last pass ran
    layout: Layout = field(init=False, repr=False)
    supervisor: Supervisor = field(init=False, repr=False)
    backups: Backups = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.layout = Layout(self.root, self.port_range)
        self.supervisor = Supervisor(self.tuning)
        self.backups = Backups(SnapshotStore(self.snapshot_dir or self.root.parent / "snapshots"), self.bin_dir)

    # -- what helpers beside a tenant (kwok) start with ------------------------------

    def dir(self, namespace: str, name: str) -> Path:
        return self.layout.dir(namespace, name)

    def admin_kubeconfig(self, namespace: str, name: str) -> Path:
        return self.dir(namespace, name) / "admin.kubeconfig"

    def alive(self, pid: int, base: Path) -> bool:
        return self.supervisor.alive(pid, base)

    def pid(self, base: Path, component: str) -> int:
        return self.supervisor.pid(base, component)

    def spawn(self, base: Path, component: str, command: list[str]) -> int:
        return self.supervisor.spawn(base, component, command)

    # -- the contract ----------------------------------------------------------------

    def endpoint_host(self, vc: Obj) -> str:
        return listen_address(vc)

    async def owned(self) -> list[tuple[str, str]]:
        return self.layout.owned()

    def usage(self, namespace: str, name: str) -> tuple[float, int] | None:
        base = self.dir(namespace, name)  # its components' pid files, not a scan of /proc: read at every scrape
        pids = {self.pid(base, f.stem) for f in base.glob("*.pid")} - {0}
        return process_usage({p for p in pids if self.alive(p, base)}) if base.is_dir() else None

    async def ensure(self, vc: Obj, pki: TenantPki, version: str = "") -> ControlPlaneState:
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        base = self.dir(namespace, name)
        host = self.endpoint_host(vc)
        external = (vc.get("spec") or {}).get("externalIP") or ""
        aside = (f" (externalIP {external} is not an address of this machine: it is in the serving certificate "
                 f"for clients that reach the apiserver through it)") if external and external != host else ""
        state = await self._claim(vc, host)
        ports = state["ports"]
        endpoint = f"https://{host}:{ports['apiserver']}"
        self._write_files_unless_written(namespace, name, pki, ports, host, endpoint)
        command_lines = commands(self.bin_dir, base, ports, host, self.tuning, pki.service_cidr,
                                 version or KUBERNETES_VERSION)
        if not (base / "etcd").exists() and (base / ASIDE).exists():  # a rollback cut short between its renames
            (base / ASIDE).rename(base / "etcd")
        self._versions[(namespace, name)] = version or KUBERNETES_VERSION
        await self._restart_stale(base, pki, command_lines)
        problems: list[str] = []
        # etcd and the apiserver first; the controller-manager and scheduler read RBAC-protected
        # objects at start-up, so they start once the apiserver has bootstrapped its roles. The
        # scheduler only once the tenant has something to schedule.
        core_alive = self.supervisor.supervise(namespace, name, base, command_lines, ("etcd", "kube-apiserver"),
                                               problems)
        serving = core_alive and await self.readyz(namespace, name, endpoint, pki)
        rest = ("kube-controller-manager",)
        if serving and await self._scheduling(vc, base, endpoint, pki):
            rest += ("kube-scheduler",)
        rest_alive = serving and self.supervisor.supervise(namespace, name, base, command_lines, rest, problems)
        if serving and rest_alive:
            self.supervisor.forget(namespace, name)
            return ControlPlaneState(True, "ControlPlaneRunning", f"tenant apiserver ready at {endpoint}{aside}",
                                     endpoint, ports["apiserver"])
        if problems:
            return ControlPlaneState(False, "ComponentRestarting", "; ".join(problems), endpoint, ports["apiserver"])
        return ControlPlaneState(False, "Starting", f"waiting for the tenant control plane at {endpoint}",
                                 endpoint, ports["apiserver"], unanswered=core_alive and not serving)

    async def upgrade(self, vc: Obj, pki: TenantPki, version: str, timeout: float) -> UpgradeOutcome:
        namespace, name = _tenant(vc)
        state = self.layout.read_state(namespace, name)
        if state is None:
            raise RuntimeFailure("ControlPlaneMissing", "the control plane has no directory here")
        base, host = self.dir(namespace, name), state["host"]
        target = commands(self.bin_dir, base, state["ports"], host, self.tuning, pki.service_cidr, version)
        endpoint = f"https://{host}:{state['ports']['apiserver']}"
        outcome = await upgrade.roll(self.supervisor, base, target, endpoint, pki, state["ports"], version, timeout)
        if outcome.ok:
            self._versions[(namespace, name)] = version
            await self.clients.forget(namespace, name)  # its connection was to the apiserver that left
        return outcome

    async def roll_back(self, vc: Obj, pki: TenantPki, snapshot: str | None) -> bool:
        """The etcd data is restored beside the data it replaces, then swapped in by renames: a server that dies
        meanwhile leaves one or the other in place (``ensure`` puts the one set aside back), never none."""
        namespace, name = _tenant(vc)
        base = self.dir(namespace, name)
        await self.supervisor.restart(base, upgrade.NEXT)  # an apiserver that never answered
        if snapshot is None:
            return False
        await self._forget(namespace, name)
        await self.supervisor.stop(base)  # everything, etcd last, so that its data can be put back
        restored, data, aside = base / "etcd.restored", base / "etcd", base / ASIDE
        shutil.rmtree(restored, ignore_errors=True)
        await self.backups.restore((namespace, name), restored, name, snapshot, f"pre-upgrade snapshot {snapshot}",
                                   lambda: self._claim(vc, self.endpoint_host(vc)))
        shutil.rmtree(aside, ignore_errors=True)
        if data.exists():
            data.rename(aside)
        restored.rename(data)
        shutil.rmtree(aside, ignore_errors=True)
        return True

    async def readyz(self, namespace: str, name: str, endpoint: str, tenant: TenantPki) -> bool:
        """Whether the tenant apiserver answers ``/readyz`` with 200, over the connection kept for it."""
        client = await self.clients.get(namespace, name, tenant, endpoint)
        try:
            await client.request("GET", "/readyz", timeout=2)
            return True
        except (HostError, HostUnavailable):
            return False

    async def hibernate(self, vc: Obj) -> bool:
        """Stop every process of the tenant, in order; its directory stays, pid files apart, so ``ensure``
        later starts the components afresh on the same ports from the same data."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        base = self.dir(namespace, name)
        await self._forget(namespace, name)
        if not base.exists():
            return True
        stopped = await self.supervisor.stop(base)
        self.supervisor.forget(namespace, name)
        return stopped

    async def teardown(self, namespace: str, name: str) -> None:
        base = self.dir(namespace, name)
        await self.backups.settle((namespace, name))
        await self._forget(namespace, name)
        if base.exists():
            await self.supervisor.kill(base)
            shutil.rmtree(base, ignore_errors=True)
        self.supervisor.forget(namespace, name)
        with contextlib.suppress(OSError):
            base.parent.rmdir()
        await self.backups.sweep((namespace, name))

    async def snapshots(self, vc: Obj) -> list[Snapshot]:
        return await self.backups.recorded(_tenant(vc))

    async def take_snapshot(self, vc: Obj, snapshot: str, moment: dt.datetime,
                            keep: int) -> tuple[Snapshot, list[Snapshot]]:
        tenant = _tenant(vc)
        base, state = self.dir(*tenant), self.layout.read_state(*tenant)
        if state is None or not self.alive(self.pid(base, "etcd"), base):
            raise RuntimeFailure("EtcdNotRunning", "the tenant's etcd is not running: no snapshot can be taken")
        return await self.backups.take(tenant, base, state["ports"]["etcd-client"], snapshot, moment, keep)

    async def prune_snapshots(self, vc: Obj, keep: int) -> list[Snapshot]:
        return await self.backups.prune(_tenant(vc), keep)

    async def restore(self, vc: Obj, origin: str, snapshot: str, label: str) -> bool:
        """etcd's own restore of a snapshot kept here, into the data directory before etcd first starts
        there: nothing when the directory of this VirtualCluster (its uid) has data already."""
        tenant = _tenant(vc)
        data = self.dir(*tenant) / "etcd"
        if not self.backups.restoring(tenant):
            state = self.layout.read_state(*tenant)
            if state is not None and state.get("uid") == vc["metadata"].get("uid") and data.exists():
                return False
        return await self.backups.restore(tenant, data, origin, snapshot, label,
                                          lambda: self._claim(vc, self.endpoint_host(vc)))

    async def last_request(self, vc: Obj, since: dt.datetime) -> dt.datetime | None:
        """The last event of the apiserver's audit log (the newest of it and its backup), read from its
        end; unknown while the running apiserver was started without one."""
        base = self.dir(*_tenant(vc))
        pid = self.pid(base, "kube-apiserver")
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if pid else []
        except OSError:
            command = []
        if command and not audit.audited(command):
            raise audit.unknown("the tenant apiserver runs without an audit log (started by an older vc-apiserver); "
                                "it gets one when it restarts")
        logs = sorted((base / "logs").glob("audit*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
        for path in logs:
            found = await asyncio.to_thread(_last_event, path)
            if found is not None:
                return found if found >= since else None
        return None

    async def release(self) -> None:
        self._written.clear()
        self.scheduling.clear()
        await self.clients.close()

    # -- between passes --------------------------------------------------------------

    async def _claim(self, vc: Obj, host: str) -> dict[str, Any]:
        """The tenant's directory and ports (``state.json``), made on first use; a directory left by an
        earlier VirtualCluster of the same name (another uid) is removed first."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        base = self.dir(namespace, name)
        async with self._lock:
            state = self.layout.read_state(namespace, name)
            if state is None or state.get("uid") != meta.get("uid"):
                if state is not None:
                    await self.supervisor.kill(base)
                    shutil.rmtree(base, ignore_errors=True)
                base.mkdir(parents=True, exist_ok=True, mode=0o700)
                state = {"uid": meta.get("uid"), "host": host, "ports": self.layout.allocate_ports(host)}
                self.layout.state_path(namespace, name).write_text(json.dumps(state))
        return state

    def _write_files_unless_written(self, namespace: str, name: str, pki: TenantPki, ports: dict[str, int],
                                    host: str, endpoint: str) -> None:
        """``write_files``, skipped when the last full pass wrote the same less than ``rewrite_after`` ago:
        reading back and comparing every file costs about 0.4 ms of vc-apiserver's CPU per pass."""
        server = f"https://127.0.0.1:{ports['apiserver']}" if host == "127.0.0.1" else endpoint
        tenant, inputs, started = (namespace, name), (pki.digest(), server), time.monotonic()
        if self._written.recall(tenant, inputs, self.rewrite_after) is None:
            write_files(self.dir(namespace, name), pki, server, self.webhook, namespace, name)
            self._written.remember(tenant, inputs, started, True)

    async def pod_addresses(self, vc: Obj) -> list[tuple[str, int]]:
        state = self.layout.read_state(*_tenant(vc))
        try:
            if state is None or ipaddress.ip_address(state["host"]).is_loopback:
                return []
        except ValueError:  # a host name: no EndpointSlice can hold it
            return []
        return [(state["host"], int(state["ports"]["apiserver"]))]

    async def rolled_out(self, vc: Obj, pki: TenantPki) -> bool:
        namespace, name = _tenant(vc)
        state = self.layout.read_state(namespace, name)
        if state is None:
            return False
        base = self.dir(namespace, name)
        return not self._stale(base, pki, commands(self.bin_dir, base, state["ports"], state["host"], self.tuning,
                                                 pki.service_cidr, self._versions.get((namespace, name),
                                                                                      KUBERNETES_VERSION)))

    def _stale(self, base: Path, pki: TenantPki, command_lines: dict[str, list[str]]) -> list[str]:
        """Running components that would not start as they run now: started from files that have changed
        since (their stamp says which), or with another command line (this server's version changed)."""
        stale = []
        for component, command in command_lines.items():
            pid = self.pid(base, component)
            if not pid or not self.alive(pid, base):
                continue
            running = self.supervisor.command_of(pid)
            changed = running is not None and running != command
            if component in READ_AT_START:
                with contextlib.suppress(FileNotFoundError):
                    changed |= (base / f"{component}.started-from").read_text() != started_from(pki, component)
            if changed:
                stale.append(component)
        return stale

    async def _restart_stale(self, base: Path, pki: TenantPki, command_lines: dict[str, list[str]]) -> None:
        """Restart what would not start as it runs now, and stamp each component with the files it starts
        from (one started by an earlier version, without a stamp, read what is there now)."""
        for component in self._stale(base, pki, command_lines):
            await self.supervisor.restart(base, component)
        for component in READ_AT_START:
            stamp = base / f"{component}.started-from"
            if not stamp.exists() or stamp.read_text() != started_from(pki, component):
                stamp.write_text(started_from(pki, component))

    async def _scheduling(self, vc: Obj, base: Path, endpoint: str, pki: TenantPki) -> bool:
        """Whether the tenant's scheduler runs: it has a pid file here (started since the tenant last
        woke, by this server or an earlier one; one that died is restarted), or it is wanted now."""
        tenant = _tenant(vc)
        if self.pid(base, "kube-scheduler"):
            self.scheduling.start(tenant)
            return True
        return await self.scheduling.wanted(tenant, vc, await self.clients.get(*tenant, pki, endpoint))

    async def _forget(self, namespace: str, name: str) -> None:
        """What is kept for a tenant between passes, for one that stops or goes."""
        self._written.forget((namespace, name))
        self.scheduling.forget((namespace, name))
        await self.clients.forget(namespace, name)


def _tenant(vc: Obj) -> tuple[str, str]:
    return vc["metadata"]["namespace"], vc["metadata"]["name"]


def _last_event(path: Path) -> dt.datetime | None:
    """The newest audit event in the tail of one audit log file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - AUDIT_TAIL, 0))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    return audit.latest(tail.splitlines())
