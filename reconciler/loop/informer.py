"""An in-process informer: the API's own watch cache, delivered as keys to a handler.

No HTTP in between: the informer registers a watcher on the watch cache, replays the
current state, and re-registers whenever the cache closes it (re-initialisation). A
periodic resync hands every key to the handler again so nothing waits on an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from apiserver.storage.cacher import WatchCache
from apiserver.storage.interface import BOOKMARK, match_all

log = logging.getLogger(__name__)


def object_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


class Informer:
    def __init__(self, cache: WatchCache, on_key: Callable[[str], None], resync_period: float = 300.0) -> None:
        self.cache = cache
        self.on_key = on_key
        self.resync_period = resync_period

    async def run(self) -> None:
        await self.cache.wait_ready()
        resync = asyncio.create_task(self._resync(), name="informer-resync")
        try:
            while True:
                watcher, backlog, _ = self.cache.watch_with_state(None, match_all, bookmarks=False)
                try:
                    for event in backlog:
                        self._deliver(event)
                    while True:
                        event = await watcher.queue.get()
                        if event is None:
                            log.info("informer watch closed (%s); re-registering", watcher.closed_reason)
                            break
                        self._deliver(event)
                finally:
                    watcher.stop()
        finally:
            resync.cancel()

    def _deliver(self, event: object) -> None:
        entry = getattr(event, "entry", None)
        if getattr(event, "type", None) == BOOKMARK or entry is None:
            return
        self.on_key(object_key(entry.namespace, entry.name))

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            for entry in list(self.cache.sorted_entries()):
                self.on_key(object_key(entry.namespace, entry.name))
