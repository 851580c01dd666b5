"""The ``process`` runtime: a tenant control plane as local processes, three or four.

Each tenant gets a directory (PKI files, etcd data, logs, ``state.json`` with its
ports) and its processes — etcd, kube-apiserver, kube-controller-manager, and
kube-scheduler once it has something to schedule (:mod:`.scheduling`) — in their own
sessions, so they outlive a vc-apiserver restart and are adopted (matched by pid and
command line) rather than started twice. A component that died is restarted with capped
back-off and its last log line is reported. A pass over
a ready tenant rewrites its files only when its PKI or address changed, and in full every
``rewrite_after`` seconds, which undoes a change made to them by hand.

Hibernation stops the processes (politely, etcd last) and keeps the directory: ``ensure``
starts them again on the same ports from the same data. The apiserver's audit log of user
requests (:mod:`.audit`) is ``logs/audit.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from apiserver.etcd.client import EtcdConfig
from apiserver.kubeclient.client import HostError, HostUnavailable
from certs import pki as pkilib
from certs.tenant import TenantPki
from reconciler.backup import etcd as backup
from reconciler.backup.snapshots import Snapshot, SnapshotStore
from reconciler.fileio import write_if_changed
from reconciler.runtime import audit
from reconciler.runtime.base import (
    BINARIES,
    ControlPlaneState,
    Obj,
    RuntimeFailure,
)
from reconciler.runtime.flags import apiserver_flags, controller_manager_flags, scheduler_flags
from reconciler.runtime.passmemo import PassMemo
from reconciler.runtime.scheduling import Scheduling
from reconciler.runtime.timerslack import inherited_timer_slack
from reconciler.runtime.tuning import LEAN, TenantTuning
from reconciler.tenantapi import TenantClients

log = logging.getLogger(__name__)

COMPONENTS = BINARIES
PORT_NAMES = ("apiserver", "etcd-client", "etcd-peer", "controller-manager", "scheduler")
MAX_BACKOFF = 30.0
REWRITE_AFTER = 60.0  # seconds a tenant's files, written unchanged, are trusted before a full pass again
# Hibernation stops these in turn, each group given STOP_GRACE seconds before it is killed: what
# talks to the apiserver first, etcd (which flushes on SIGTERM) last.
STOP_ORDER = (("kwok", "kube-controller-manager", "kube-scheduler"), ("kube-apiserver",), ("etcd",))
STOP_GRACE = 10.0
AUDIT_TAIL = 64 * 1024  # bytes read from the end of the audit log to find its last event


def _last_event(path: Path) -> dt.datetime | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - AUDIT_TAIL, 0))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    return audit.latest(tail.splitlines())


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _is_local_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return can_bind(value)


def can_bind(host: str) -> bool:
    """Whether this machine owns ``host`` (an address the apiserver could listen on)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, 0))
        except OSError:
            return False
    return True


@dataclass
class _Health:
    restarts: int = 0
    next_start: float = 0.0
    last_error: str = ""


@dataclass
class ProcessRuntime:
    """Tenant control planes under ``root``, with ports from ``port_range``."""

    root: Path
    bin_dir: Path
    port_range: tuple[int, int] = (20000, 29999)  # below the kernel's ephemeral ports
    snapshot_dir: Path | None = None  # where tenants' snapshots are kept; default: snapshots beside root
    tuning: TenantTuning = LEAN
    name: str = "process"
    WAKE_ESTIMATE: ClassVar[int] = 10  # wake -> Ready measured 3.5 s alone on 2 cores (docs/benchmarks.md)
    _health: dict[tuple[str, str, str], _Health] = field(default_factory=dict)
    _children: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _restoring: dict[tuple[str, str], asyncio.Task[bool]] = field(default_factory=dict)
    clients: TenantClients = field(default_factory=TenantClients)
    rewrite_after: float = REWRITE_AFTER
    _written: PassMemo[bool] = field(default_factory=PassMemo)  # by tenant: the PKI digest and URL last written
    scheduling: Scheduling = field(default_factory=Scheduling)

    def __post_init__(self) -> None:
        self.store = SnapshotStore(self.snapshot_dir or self.root.parent / "snapshots")

    # -- layout ------------------------------------------------------------------------

    def dir(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    def _state_path(self, namespace: str, name: str) -> Path:
        return self.dir(namespace, name) / "state.json"

    def _read_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._state_path(namespace, name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def endpoint_host(self, vc: Obj) -> str:
        """The address the tenant apiserver listens on: externalIP when this machine owns it, else
        loopback. An externalIP it does not own (a VIP, a NAT address, the examples' dummy IP) is
        how clients elsewhere reach the apiserver: it goes in the certificate, not in a bind."""
        external = (vc.get("spec") or {}).get("externalIP") or ""
        return external if _is_local_ip(external) else "127.0.0.1"

    async def owned(self) -> list[tuple[str, str]]:
        if not self.root.exists():
            return []
        return [(ns.name, d.name) for ns in self.root.iterdir() if ns.is_dir()
                for d in ns.iterdir() if (d / "state.json").exists()]

    def allocate_ports(self, host: str) -> dict[str, int]:
        """Free ports, skipping every port another tenant here has recorded."""
        taken: set[int] = set()
        if self.root.exists():
            for state in self.root.glob("*/*/state.json"):
                with contextlib.suppress(ValueError, OSError):
                    taken |= set(json.loads(state.read_text())["ports"].values())
        ports: dict[str, int] = {}
        start, end = self.port_range
        candidate = start + (os.getpid() * 7) % max(end - start, 1)
        for _ in range(end - start):
            candidate = start + (candidate - start + 1) % (end - start)
            if candidate in taken or candidate in ports.values():
                continue
            bind_host = host if PORT_NAMES[len(ports)] == "apiserver" else "127.0.0.1"
            if _port_free(bind_host, candidate):
                ports[PORT_NAMES[len(ports)]] = candidate
                if len(ports) == len(PORT_NAMES):
                    return ports
        raise RuntimeFailure("NoFreePorts", f"no free ports in {start}-{end} for a control plane")

    # -- files -----------------------------------------------------------------------

    def write_files(self, base: Path, tenant: TenantPki, server: str) -> None:
        """The PKI, the components' kubeconfigs and the apiserver's audit policy. Every reconcile writes
        these, while components may be (re)starting and reading them: a file is only replaced when its
        content changes, and then atomically."""
        pki_dir = base / "pki"
        pki_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for filename, pem in tenant.files.items():
            write_if_changed(pki_dir / filename, pem, 0o600)
        ca = tenant.files["ca.crt"]
        for stem in ("controller-manager", "scheduler", "admin"):
            config = pkilib.kubeconfig(server, ca, stem, tenant.files[f"{stem}.crt"], tenant.files[f"{stem}.key"])
            write_if_changed(base / f"{stem}.kubeconfig", json.dumps(config).encode(), 0o600)
        write_if_changed(base / "audit-policy.yaml", audit.policy_file(), 0o600)

    def _write_files_unless_written(self, namespace: str, name: str, pki: TenantPki, ports: dict[str, int],
                                    host: str, endpoint: str) -> None:
        """``write_files``, skipped when the last full pass wrote the same less than ``rewrite_after`` ago:
        reading back and comparing every file costs about 0.4 ms of vc-apiserver's CPU per pass."""
        server = f"https://127.0.0.1:{ports['apiserver']}" if host == "127.0.0.1" else endpoint
        tenant, inputs, started = (namespace, name), (pki.digest(), server), time.monotonic()
        if self._written.recall(tenant, inputs, self.rewrite_after) is None:
            self.write_files(self.dir(namespace, name), pki, server)
            self._written.remember(tenant, inputs, started, True)

    def commands(self, base: Path, ports: dict[str, int], bind: str) -> dict[str, list[str]]:
        p = base / "pki"
        b = self.bin_dir
        etcd_url = f"https://127.0.0.1:{ports['etcd-client']}"
        peer_url = f"https://127.0.0.1:{ports['etcd-peer']}"
        return {
            "etcd": [str(b / "etcd"), "--name", "tenant", "--data-dir", str(base / "etcd"),
                     "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                     "--initial-cluster", f"tenant={peer_url}", "--listen-metrics-urls", "",
                     "--cert-file", str(p / "etcd-server.crt"), "--key-file", str(p / "etcd-server.key"),
                     "--trusted-ca-file", str(p / "etcd-ca.crt"), "--client-cert-auth",
                     "--peer-cert-file", str(p / "etcd-peer.crt"), "--peer-key-file", str(p / "etcd-peer.key"),
                     "--peer-trusted-ca-file", str(p / "etcd-ca.crt"), "--peer-client-cert-auth",
                     "--log-level", "warn", "--snapshot-count", "10000"],
            "kube-apiserver": [str(b / "kube-apiserver"), *apiserver_flags(
                str(p), bind=bind, advertise=bind, port=ports["apiserver"], etcd_servers=etcd_url,
                audit_policy=str(base / "audit-policy.yaml"), audit_log=str(base / "logs" / "audit.log"),
                tuning=self.tuning)],
            "kube-controller-manager": [str(b / "kube-controller-manager"), *controller_manager_flags(
                str(p), str(base / "controller-manager.kubeconfig"), bind="127.0.0.1",
                port=ports["controller-manager"], leader_elect=False)],
            "kube-scheduler": [str(b / "kube-scheduler"), *scheduler_flags(
                str(base / "scheduler.kubeconfig"), bind="127.0.0.1", port=ports["scheduler"], leader_elect=False)],
        }

    # -- processes -------------------------------------------------------------------

    def alive(self, pid: int, base: Path) -> bool:
        """Alive and ours: a recycled pid running something else does not count."""
        child = self._children.get(pid)
        if child is not None:
            # Our own child: alive until reaped, and its pid cannot be recycled before that. (Just
            # after spawning, /proc/<pid>/cmdline can still be empty while the exec completes.)
            if child.poll() is None:
                return True
            del self._children[pid]
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not cmdline:  # in the middle of its exec: spawn() starts every component in its tenant's dir
                cmdline = os.readlink(f"/proc/{pid}/cwd").encode() + b"/"
        except OSError:
            return False
        if str(base).encode() not in cmdline:
            return False
        try:
            status = Path(f"/proc/{pid}/stat").read_text()
            return status.rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    def pid(self, base: Path, component: str) -> int:
        try:
            return int((base / f"{component}.pid").read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def spawn(self, base: Path, component: str, command: list[str]) -> int:
        logs = base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{component}.log", "ab") as out, inherited_timer_slack(self.tuning.timer_slack(component)):
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=base, env={**os.environ, **self.tuning.env(component)})
        (base / f"{component}.pid").write_text(str(proc.pid))
        self._children[proc.pid] = proc
        return proc.pid

    @staticmethod
    def _last_error(base: Path, component: str) -> str:
        try:
            lines = (base / "logs" / f"{component}.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        for line in reversed(lines[-50:]):
            text = line.strip()
            if text and any(w in text.lower() for w in ("error", "fatal", "failed", "cannot", "panic")):
                return text[-300:]
        return lines[-1][-300:] if lines else ""

    # -- the contract ----------------------------------------------------------------

    async def _claim(self, vc: Obj, host: str) -> dict[str, Any]:
        """The tenant's directory and ports (``state.json``), made on first use; a directory left by an
        earlier VirtualCluster of the same name (another uid) is removed first."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        base = self.dir(namespace, name)
        async with self._lock:
            state = self._read_state(namespace, name)
            if state is None or state.get("uid") != meta.get("uid"):
                if state is not None:
                    await self._stop_all(base)
                    shutil.rmtree(base, ignore_errors=True)
                base.mkdir(parents=True, exist_ok=True, mode=0o700)
                state = {"uid": meta.get("uid"), "host": host, "ports": self.allocate_ports(host)}
                self._state_path(namespace, name).write_text(json.dumps(state))
        return state

    async def restore(self, vc: Obj, origin: str, snapshot: str, label: str) -> bool:
        """etcd's own restore (:func:`reconciler.backup.etcd.restore`) of a snapshot kept here, into the
        data directory before etcd first starts there. A restore runs to its end even when the pass that
        started it is cancelled (leadership lost): the next pass waits for it and takes its outcome, so it
        is reported once and never runs twice at once."""
        meta = vc["metadata"]
        key = (meta["namespace"], meta["name"])
        running = self._restoring.get(key)
        if running is None:
            state = self._read_state(*key)
            if state is not None and state.get("uid") == meta.get("uid") and (self.dir(*key) / "etcd").exists():
                return False
            running = self._restoring[key] = asyncio.create_task(self._restore(vc, origin, snapshot, label),
                                                                    name=f"restore {key[0]}/{key[1]}")
        try:
            restored = await asyncio.shield(running)
        finally:
            if running.done():
                self._restoring.pop(key, None)
        if restored:
            log.info("restored %s into %s/%s", label, *key)
        return restored

    async def _restore(self, vc: Obj, origin: str, snapshot: str, label: str) -> bool:
        meta = vc["metadata"]
        base = self.dir(meta["namespace"], meta["name"])
        source, etcdutl = self.store.path(meta["namespace"], origin, snapshot), self.bin_dir / "etcdutl"
        try:
            await asyncio.to_thread(backup.check, etcdutl, source, label)
            state = await self._claim(vc, self.endpoint_host(vc))  # the ports etcd's membership records
            peer = f"https://127.0.0.1:{state['ports']['etcd-peer']}"
            member = backup.Member("tenant", peer, f"tenant={peer}")
            return await asyncio.to_thread(backup.restore, etcdutl, source, base / "etcd", member, label)
        except backup.BackupFailure as e:
            raise RuntimeFailure.of(e) from None

    async def ensure(self, vc: Obj, pki: TenantPki) -> ControlPlaneState:
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
        commands = self.commands(base, ports, host)
        problems: list[str] = []
        # etcd and the apiserver first; the controller-manager and scheduler read RBAC-protected
        # objects at start-up, so they start once the apiserver has bootstrapped its roles. The
        # scheduler only once the tenant has something to schedule (:mod:`.scheduling`).
        core_alive = self._supervise(namespace, name, base, commands, ("etcd", "kube-apiserver"), problems)
        serving = core_alive and await self.readyz(namespace, name, endpoint, pki)
        rest = ("kube-controller-manager",)
        if serving and await self._scheduling(vc, base, endpoint, pki):
            rest += ("kube-scheduler",)
        rest_alive = serving and self._supervise(namespace, name, base, commands, rest, problems)
        if serving and rest_alive:
            for component in COMPONENTS:
                self._health.pop((namespace, name, component), None)
            return ControlPlaneState(True, "ControlPlaneRunning", f"tenant apiserver ready at {endpoint}{aside}",
                                     endpoint, ports["apiserver"])
        if problems:
            return ControlPlaneState(False, "ComponentRestarting", "; ".join(problems), endpoint, ports["apiserver"])
        return ControlPlaneState(False, "Starting", f"waiting for the tenant control plane at {endpoint}",
                                 endpoint, ports["apiserver"], unanswered=core_alive and not serving)

    async def _scheduling(self, vc: Obj, base: Path, endpoint: str, pki: TenantPki) -> bool:
        """Whether the tenant's scheduler runs: it has a pid file here (started since the tenant last
        woke, by this server or an earlier one; one that died is restarted), or it is wanted now."""
        tenant = (vc["metadata"]["namespace"], vc["metadata"]["name"])
        if self.pid(base, "kube-scheduler"):
            self.scheduling.start(tenant)
            return True
        return await self.scheduling.wanted(tenant, vc, await self.clients.get(*tenant, pki, endpoint))

    def _supervise(self, namespace: str, name: str, base: Path, commands: dict[str, list[str]],
                   components: tuple[str, ...], problems: list[str]) -> bool:
        """Start what is not running (a restart waits out its back-off); True if all were running."""
        now = time.monotonic()
        all_alive = True
        for component in components:
            if self.alive(self.pid(base, component), base):
                continue
            health = self._health.setdefault((namespace, name, component), _Health())
            if self.pid(base, component):
                health.last_error = self._last_error(base, component)
                if health.next_start == 0.0:
                    health.restarts += 1
                    health.next_start = now + min(2 ** min(health.restarts, 5), MAX_BACKOFF)
            if now >= health.next_start:
                pid = self.spawn(base, component, commands[component])
                health.next_start = 0.0
                log.info("started %s for %s/%s (pid %d)", component, namespace, name, pid)
                all_alive = all_alive and not health.restarts  # a first start counts; a restart must prove itself
            else:
                all_alive = False
            if health.restarts:
                problems.append(f"{component} exited {health.restarts} time(s), last: {health.last_error}")
        return all_alive

    async def readyz(self, namespace: str, name: str, endpoint: str, tenant: TenantPki) -> bool:
        """Whether the tenant apiserver answers ``/readyz`` with 200, over the connection kept for it."""
        client = await self.clients.get(namespace, name, tenant, endpoint)
        try:
            await client.request("GET", "/readyz", timeout=2)
            return True
        except (HostError, HostUnavailable):
            return False

    async def _stop_all(self, base: Path) -> None:
        """Kill every component now: their data is removed right after, nothing to flush."""
        pids = {self.pid(base, pidfile.stem) for pidfile in base.glob("*.pid")}  # components and helpers (kwok)
        pids |= self.processes_under(base)  # and anything a lost pid file no longer names
        for pid in pids:
            if pid and self.alive(pid, base):
                try:
                    os.killpg(pid, signal.SIGKILL)  # the component and anything it started
                except ProcessLookupError:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)  # not a group leader
        for _ in range(50):  # reaped within a few hundred milliseconds
            if not any(pid and self.alive(pid, base) for pid in pids):
                return
            await asyncio.sleep(0.1)

    @staticmethod
    def processes_under(base: Path) -> set[int]:
        """Live processes whose command line points into a tenant's directory."""
        marker = str(base).encode() + b"/"
        found = set()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if marker in (proc / "cmdline").read_bytes():
                        found.add(int(proc.name))
        return found

    async def hibernate(self, vc: Obj) -> bool:
        """Stop every process of the tenant (a polite SIGTERM, then SIGKILL after STOP_GRACE), in
        STOP_ORDER; its directory stays, pid files apart, so ``ensure`` later starts the components
        afresh (not as restarts of crashed ones) on the same ports from the same data."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        base = self.dir(namespace, name)
        await self._forget(namespace, name)
        if not base.exists():
            return True
        for group in STOP_ORDER:
            await self._stop(base, {self.pid(base, c) for c in group})
        await self._stop(base, self.processes_under(base))  # anything a lost pid file no longer names
        for pidfile in base.glob("*.pid"):
            pidfile.unlink(missing_ok=True)
        for component in COMPONENTS:
            self._health.pop((namespace, name, component), None)
        return not self.processes_under(base)

    async def _stop(self, base: Path, pids: set[int]) -> None:
        """SIGTERM to each process's group, SIGKILL to what is left after STOP_GRACE."""
        pids = {pid for pid in pids if pid and self.alive(pid, base)}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            deadline = time.monotonic() + STOP_GRACE
            while time.monotonic() < deadline:
                pids = {pid for pid in pids if self.alive(pid, base)}
                if not pids:
                    return
                await asyncio.sleep(0.05)
            if sig == signal.SIGTERM:
                log.warning("killing what did not stop within %.0fs of SIGTERM in %s: pids %s", STOP_GRACE, base,
                            sorted(pids))

    async def snapshots(self, vc: Obj) -> list[Snapshot]:
        meta = vc["metadata"]
        await asyncio.to_thread(self.store.sweep, meta["namespace"], meta["name"])
        return await asyncio.to_thread(self.store.list, meta["namespace"], meta["name"])

    async def take_snapshot(self, vc: Obj, snapshot: str, moment: dt.datetime,
                            keep: int) -> tuple[Snapshot, list[Snapshot]]:
        """etcd's snapshot stream over TLS with the apiserver's etcd client certificate, into the
        snapshot directory."""
        meta = vc["metadata"]
        base = self.dir(meta["namespace"], meta["name"])
        state = self._read_state(meta["namespace"], meta["name"])
        if state is None or not self.alive(self.pid(base, "etcd"), base):
            raise RuntimeFailure("EtcdNotRunning", "the tenant's etcd is not running: no snapshot can be taken")
        p = base / "pki"
        config = EtcdConfig([f"https://127.0.0.1:{state['ports']['etcd-client']}"], cafile=str(p / "etcd-ca.crt"),
                            certfile=str(p / "apiserver-etcd-client.crt"),
                            keyfile=str(p / "apiserver-etcd-client.key"), request_timeout=10.0)
        try:
            return await backup.take(self.store, meta["namespace"], meta["name"], snapshot, moment, keep, config)
        except backup.BackupFailure as e:
            raise RuntimeFailure.of(e) from None

    async def prune_snapshots(self, vc: Obj, keep: int) -> list[Snapshot]:
        meta = vc["metadata"]
        return await asyncio.to_thread(self.store.prune, meta["namespace"], meta["name"], keep)

    async def last_request(self, vc: Obj, since: dt.datetime) -> dt.datetime | None:
        """The last event of the apiserver's audit log (the newest of it and its backup), read from its
        end; unknown while the running apiserver was started without one."""
        meta = vc["metadata"]
        base = self.dir(meta["namespace"], meta["name"])
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

    async def _forget(self, namespace: str, name: str) -> None:
        """What is kept for a tenant between passes, for one that stops or goes."""
        self._written.forget((namespace, name))
        self.scheduling.forget((namespace, name))
        await self.clients.forget(namespace, name)

    async def teardown(self, namespace: str, name: str) -> None:
        base = self.dir(namespace, name)
        restoring = self._restoring.pop((namespace, name), None)
        if restoring is not None:  # a restore left running by a cancelled pass writes nothing after this
            with contextlib.suppress(Exception):
                await restoring
        await self._forget(namespace, name)
        if base.exists():
            await self._stop_all(base)
            shutil.rmtree(base, ignore_errors=True)
        for component in COMPONENTS:
            self._health.pop((namespace, name, component), None)
        with contextlib.suppress(OSError):
            base.parent.rmdir()
        # the snapshots stay (they are backups), what an unfinished one left does not
        await asyncio.to_thread(self.store.sweep, namespace, name)

    def admin_kubeconfig(self, namespace: str, name: str) -> Path:
        return self.dir(namespace, name) / "admin.kubeconfig"
