"""Snapshots as the ``process`` runtime takes, prunes and restores them: etcd's own snapshot and restore
(:mod:`reconciler.backup.etcd`) against files kept on this machine (:class:`SnapshotStore`).

A restore runs to its end even when the pass that started it is cancelled (leadership lost): the next
pass waits for it and takes its outcome, so it is reported once and never runs twice at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apiserver.etcd.client import EtcdConfig
from reconciler.backup import etcd as backup
from reconciler.backup.snapshots import Snapshot, SnapshotStore
from reconciler.runtime.base import RuntimeFailure

__all__ = ["Backups"]

log = logging.getLogger(__name__)

Tenant = tuple[str, str]  # (namespace, name)


@dataclass
class Backups:
    """Snapshots in ``store``, with the ``etcdutl`` of ``bin_dir``."""

    store: SnapshotStore
    bin_dir: Path
    _restoring: dict[Tenant, asyncio.Task[bool]] = field(default_factory=dict)

    async def recorded(self, tenant: Tenant) -> list[Snapshot]:
        """What is recorded, what an unfinished snapshot left swept first."""
        await self.sweep(tenant)
        return await asyncio.to_thread(self.store.list, *tenant)

    async def take(self, tenant: Tenant, base: Path, etcd_port: int, snapshot: str, moment: dt.datetime,
                   keep: int) -> tuple[Snapshot, list[Snapshot]]:
        """etcd's snapshot stream over TLS with the apiserver's etcd client certificate, into the store."""
        p = base / "pki"
        config = EtcdConfig([f"https://127.0.0.1:{etcd_port}"], cafile=str(p / "etcd-ca.crt"),
                            certfile=str(p / "apiserver-etcd-client.crt"),
                            keyfile=str(p / "apiserver-etcd-client.key"), request_timeout=10.0)
        try:
            return await backup.take(self.store, *tenant, snapshot, moment, keep, config)
        except backup.BackupFailure as e:
            raise RuntimeFailure.of(e) from None

    async def prune(self, tenant: Tenant, keep: int) -> list[Snapshot]:
        return await asyncio.to_thread(self.store.prune, *tenant, keep)

    async def restore(self, tenant: Tenant, data_dir: Path, origin: str, snapshot: str, label: str,
                      claim: Callable[[], Awaitable[dict[str, Any]]]) -> bool:
        """``origin``'s snapshot restored into ``data_dir``, once ``claim`` has given the tenant's state
        (the ports etcd's membership records); a restore of this tenant already running is waited for
        instead. Raises RuntimeFailure."""
        running = self._restoring.get(tenant)
        if running is None:
            running = self._restoring[tenant] = asyncio.create_task(
                self._restore(tenant, data_dir, origin, snapshot, label, claim), name=f"restore {tenant[0]}/{tenant[1]}")
        try:
            restored = await asyncio.shield(running)
        finally:
            if running.done():
                self._restoring.pop(tenant, None)
        if restored:
            log.info("restored %s into %s/%s", label, *tenant)
        return restored

    def restoring(self, tenant: Tenant) -> bool:
        return tenant in self._restoring

    async def _restore(self, tenant: Tenant, data_dir: Path, origin: str, snapshot: str, label: str,
                       claim: Callable[[], Awaitable[dict[str, Any]]]) -> bool:
        source, etcdutl = self.store.path(tenant[0], origin, snapshot), self.bin_dir / "etcdutl"
        try:
            await asyncio.to_thread(backup.check, etcdutl, source, label)
            state = await claim()
            peer = f"https://127.0.0.1:{state['ports']['etcd-peer']}"
            member = backup.Member("tenant", peer, f"tenant={peer}")
            return await asyncio.to_thread(backup.restore, etcdutl, source, data_dir, member, label)
        except backup.BackupFailure as e:
            raise RuntimeFailure.of(e) from None

    async def settle(self, tenant: Tenant) -> None:
        """For a tenant that goes: a restore left running by a cancelled pass writes nothing after this."""
        restoring = self._restoring.pop(tenant, None)
        if restoring is not None:
            with contextlib.suppress(Exception):
                await restoring

    async def sweep(self, tenant: Tenant) -> None:
        """What an unfinished snapshot left, removed; the snapshots stay (they are backups)."""
        await asyncio.to_thread(self.store.sweep, *tenant)
