"""The VirtualClusterCredential's storage: the generic store with its strategy, and the sweep that
removes what no longer opens anything (credentials past their expiry, and those of a VirtualCluster
that is gone), so the list shows what can still be used.

For an imported cluster the sweep also does what the tenants' authorization webhook does for a built
one (an imported apiserver cannot be told to ask): it revokes the credentials whose holder lost
``get virtualclusters/kubeconfig`` on the host, and deletes every ServiceAccount made there whose
credential is gone."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging

from apiserver.apis.credential import CLUSTER_LABEL
from apiserver.auth.authn import Authorizer
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.imported import ImportError_, import_ref, reach
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import parse_rfc3339
from apiserver.registry.credential.access import access_lost
from apiserver.registry.credential.strategy import CredentialStrategy
from apiserver.registry.rest import DeleteOptions, ListOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.storage.interface import Entry, Storage

__all__ = ["CredentialSweeper", "new_registry"]

log = logging.getLogger(__name__)

SWEEP_PERIOD = 30.0  # seconds between sweeps: with the host's answers cached 10 s, an imported cluster's
# credentials are refused within 40 s of their holder losing access


def new_registry(storage: Storage) -> Registry:
    return Registry(storage, CredentialStrategy())


class CredentialSweeper:
    """Deletes expired credentials and those whose VirtualCluster is gone, every ``period`` seconds.
    Every replica sweeps; a delete another replica already made is a 404, and nothing else happens."""

    def __init__(self, credentials: Registry, clusters: Registry, period: float = SWEEP_PERIOD,
                 host: KubeClient | None = None, authorizer: Authorizer | None = None) -> None:
        self.credentials = credentials
        self.clusters = clusters
        self.host = host
        self.authorizer = authorizer
        self.period = period
        self._task: asyncio.Task[None] | None = None

    async def sweep(self, now: dt.datetime | None = None) -> list[str]:
        """One pass; returns the names deleted (``namespace/name``)."""
        now = now or dt.datetime.now(dt.UTC)
        listed = await self.credentials.list(None, ListOptions())
        clusters = {(e.namespace, e.name): e.obj for e in (await self.clusters.list(None, ListOptions())).entries}
        gone, kept = [], []
        for entry in listed.entries:
            spec = entry.obj.get("spec") or {}
            cluster = spec.get("virtualCluster") or (entry.labels or {}).get(CLUSTER_LABEL)
            try:
                expired = parse_rfc3339(spec["expirationTimestamp"]) <= now
            except (KeyError, ValueError, TypeError):
                expired = False
            if not expired and (entry.namespace, cluster) in clusters:
                kept.append(entry)
                continue
            if await self._delete(entry.namespace, entry.name):
                gone.append(f"{entry.namespace}/{entry.name}")
        for (namespace, name), obj in clusters.items():
            if import_ref(obj) is not None and not obj["metadata"].get("deletionTimestamp"):
                mine = [e for e in kept if e.namespace == namespace and (e.obj.get("spec") or {}).get(
                    "virtualCluster") == name]
                gone += await self._sweep_import(obj, mine)
        return gone

    async def _delete(self, namespace: str, name: str) -> bool:
        try:
            await self.credentials.delete(namespace, name, DeleteOptions(), WriteOptions())
        except errors.ApiError:
            return False
        return True

    async def _sweep_import(self, obj: Obj, credentials: list[Entry]) -> list[str]:
        """Revoke the imported cluster's credentials whose holder lost host access, and remove the accounts
        of credentials that are gone."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        gone, live = [], set()
        for entry in credentials:
            if self.authorizer is not None and await access_lost(self.authorizer, namespace, name,
                                                                 entry.obj.get("spec") or {}):
                if await self._delete(namespace, entry.name):
                    gone.append(f"{namespace}/{entry.name}")
                    continue
            live.add(entry.name)
        if self.host is None:
            return gone
        try:
            async with reach(self.host, obj) as cluster:
                for account in await cluster.credentials() - live:
                    await cluster.revoke(account)
        except (ImportError_, HostError, HostUnavailable) as e:
            log.warning("cannot sweep the credentials of imported cluster %s/%s: %s", namespace, name, e)
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
