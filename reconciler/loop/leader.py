"""Leader election on an etcd lease, so that two replicas never reconcile at once.

The leader key is written only if absent and is bound to a lease; the leader keeps
the lease alive and steps down (cancelling its work) the moment a keepalive fails or
the lease expires. Followers watch the key and try again the moment it is deleted (its
lease expired or it was released), polling every retry period besides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from apiserver.etcd.client import EtcdClient, EtcdError, EtcdUnavailable
from apiserver.etcd.messages import Event, compare_absent, compare_value, op_delete, op_put
from apiserver.storage.keys import LEADER_KEY_PREFIX

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(self, etcd: EtcdClient, name: str, identity: str, lease_duration: int = 15,
                 retry_period: float = 2.0) -> None:
        self.etcd = etcd
        self.key = LEADER_KEY_PREFIX + name
        self.identity = identity
        self.lease_duration = lease_duration
        self.retry_period = retry_period
        self.is_leader = False
        self._lease = 0
        self._held_at = 0  # the revision at which another replica was last seen holding the key

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Forever: become leader, run ``lead`` until leadership is lost, repeat."""
        while True:
            try:
                if await self._acquire():
                    log.info("%s became leader for %s", self.identity, self.key)
                    await self._lead(lead)
                    log.warning("%s lost leadership for %s", self.identity, self.key)
                else:
                    await self._await_vacancy()
                    continue
            except EtcdError as e:
                log.warning("leader election: %s", e)
            self.is_leader = False
            await asyncio.sleep(self.retry_period)

    async def _acquire(self) -> bool:
        lease = await self.etcd.lease_grant(self.lease_duration)
        result = await self.etcd.txn([compare_absent(self.key)],
                                     [op_put(self.key, self.identity.encode(), lease=lease)])
        if not result.succeeded:
            self._held_at = result.header.revision
            with contextlib.suppress(EtcdError):
                await self.etcd.lease_revoke(lease)
            return False
        self._lease = lease
        self.is_leader = True
        return True

    async def _await_vacancy(self) -> None:
        """Return when the leader key is deleted after it was seen held, or after a retry period."""
        async def deleted() -> None:
            async for resp in self.etcd.watch(self.key, start_revision=self._held_at + 1, prev_kv=False,
                                              progress_notify=False):
                if any(ev.type == Event.DELETE for ev in resp.events):
                    return
            raise EtcdUnavailable("the watch of the leader key ended")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(deleted(), self.retry_period)

    async def _lead(self, lead: Callable[[], Awaitable[None]]) -> None:
        work = asyncio.create_task(lead(), name="leader-work")
        try:
            while not work.done():
                await asyncio.wait([work], timeout=self.lease_duration / 3)
                if work.done():
                    break
                try:
                    ttl = await self.etcd.lease_keepalive(self._lease)
                except EtcdError as e:
                    log.warning("lease keepalive failed: %s", e)
                    ttl = 0
                if ttl <= 0:
                    break
        finally:
            self.is_leader = False
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
        if work.done() and not work.cancelled() and work.exception() is not None:
            log.error("leader work failed", exc_info=work.exception())

    async def release(self) -> None:
        """Step down on shutdown so a peer takes over without waiting for the lease to expire."""
        if not self._lease:
            return
        with contextlib.suppress(EtcdError):
            await self.etcd.txn([compare_value(self.key, self.identity)], [op_delete(self.key)])
            await self.etcd.lease_revoke(self._lease)
        self._lease = 0
