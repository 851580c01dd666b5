"""Periodic etcd compaction, coordinated between replicas as kube-apiserver does.

Every interval, the revision seen at the previous tick is compacted, so roughly one
interval of history stays available for watches and paged lists. A txn on
``compact_rev_key``'s version makes sure only one replica compacts per interval.
"""

from __future__ import annotations

import asyncio
import logging

from apiserver.etcd.client import EtcdClient, EtcdError
from apiserver.etcd.messages import compare_mod_revision, op_put
from apiserver.storage.keys import COMPACT_KEY

log = logging.getLogger(__name__)


class Compactor:
    def __init__(self, etcd: EtcdClient, interval: float) -> None:
        self.etcd = etcd
        self.interval = interval
        self.compacted_to = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.create_task(self._run(), name="compactor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        last_rev = 0
        while True:
            await asyncio.sleep(self.interval)
            try:
                last_rev = await self.compact_once(last_rev)
            except EtcdError as e:
                log.warning("compaction skipped: %s", e)

    async def compact_once(self, target: int) -> int:
        """Compact to ``target`` if no other replica did this round; returns the next target."""
        current = await self.etcd.get(COMPACT_KEY)
        expected = current.mod_revision if current else 0
        result = await self.etcd.txn([compare_mod_revision(COMPACT_KEY, expected)],
                                     [op_put(COMPACT_KEY, str(target).encode())])
        if result.succeeded and target > self.compacted_to and target > 0:
            try:
                await self.etcd.compact(target)
                self.compacted_to = target
                log.info("compacted etcd to revision %d", target)
            except EtcdError as e:
                if "compacted" not in e.message:
                    raise
        return result.header.revision
