"""The VirtualClusterCredential's storage: the generic store with its strategy, and the sweep that
removes what no longer opens anything (credentials past their expiry, and those of a VirtualCluster
that is gone), so the list shows what can still be used."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging

from apiserver.apis.credential import CLUSTER_LABEL
from apiserver.machinery import errors
from apiserver.machinery.timefmt import parse_rfc3339
from apiserver.registry.credential.strategy import CredentialStrategy
from apiserver.registry.rest import DeleteOptions, ListOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.storage.interface import Storage

__all__ = ["CredentialSweeper", "new_registry"]

log = logging.getLogger(__name__)

SWEEP_PERIOD = 60.0  # seconds between sweeps


def new_registry(storage: Storage) -> Registry:
    return Registry(storage, CredentialStrategy())


class CredentialSweeper:
    """Deletes expired credentials and those whose VirtualCluster is gone, every ``period`` seconds.
    Every replica sweeps; a delete another replica already made is a 404, and nothing else happens."""

    def __init__(self, credentials: Registry, clusters: Registry, period: float = SWEEP_PERIOD) -> None:
        self.credentials = credentials
        self.clusters = clusters
        self.period = period
        self._task: asyncio.Task[None] | None = None

    async def sweep(self, now: dt.datetime | None = None) -> list[str]:
        """One pass; returns the names deleted (``namespace/name``)."""
        now = now or dt.datetime.now(dt.UTC)
        listed = await self.credentials.list(None, ListOptions())
        clusters = {(e.namespace, e.name) for e in (await self.clusters.list(None, ListOptions())).entries}
        gone = []
        for entry in listed.entries:
            spec = entry.obj.get("spec") or {}
            cluster = spec.get("virtualCluster") or (entry.labels or {}).get(CLUSTER_LABEL)
            try:
                expired = parse_rfc3339(spec["expirationTimestamp"]) <= now
            except (KeyError, ValueError, TypeError):
                expired = False
            if not expired and (entry.namespace, cluster) in clusters:
                continue
            with contextlib.suppress(errors.ApiError):
                await self.credentials.delete(entry.namespace, entry.name, DeleteOptions(), WriteOptions())
                gone.append(f"{entry.namespace}/{entry.name}")
        return gone

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                if gone := await self.sweep():
                    log.info("removed %d credentials that open nothing any more: %s", len(gone), ", ".join(gone))
            except errors.ApiError as e:
                log.warning("sweeping credentials: %s", e.message)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="credential-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
