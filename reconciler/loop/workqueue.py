"""A work queue with client-go's guarantees.

A key is queued at most once (dedupe), handed to at most one worker at a time (a
key added while it is being processed is re-queued when that worker is done), and
retried with capped exponential back-off per key.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque


class WorkQueue:
    def __init__(self, base_delay: float = 0.05, max_delay: float = 60.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._wakeup = asyncio.Condition()
        self._shutdown = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._wakeup:
            self._wakeup.notify()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending timer wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        when = loop.time() + delay
        if existing is not None and existing.when() <= when:
            return
        if existing is not None:
            existing.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: str) -> float:
        """Retry ``key`` after its next back-off step; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = backoff(self.base_delay, self.max_delay, failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> str | None:
        """The next key to process, or None once shut down."""
        async with self._wakeup:
            await self._wakeup.wait_for(lambda: bool(self._queue) or self._shutdown)
            if self._shutdown:
                return None
            key = self._queue.popleft()
            self._dirty.discard(key)
            self._processing.add(key)
            return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            asyncio.get_running_loop().create_task(self._notify())

    async def shutdown(self) -> None:
        self._shutdown = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        async with self._wakeup:
            self._wakeup.notify_all()


def backoff(base_delay: float, max_delay: float, failures: int) -> float:
    """``base_delay * 2**failures``, at most ``max_delay``.

    As client-go's ItemExponentialFailureRateLimiter: a product too large to represent (there,
    beyond int64 nanoseconds; here, beyond a float, from about a thousand failures of one key on)
    is the longest delay, never an overflow.
    """
    try:
        delay = math.ldexp(base_delay, failures)  # exact: only the exponent changes
    except OverflowError:
        return max_delay
    return min(delay, max_delay)
