"""Waiting for what a test observes: the value seen, once it is as wanted."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(observe: Callable[[], T], done: Callable[[T], bool], timeout: float = 90, what: str = "",
          interval: float = 0.5) -> T:
    """``observe()`` again and again until ``done`` says yes: what it last saw (AssertionError after ``timeout``,
    with what was seen last)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = observe()
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not reached in {timeout}s; last seen: {seen}")
        time.sleep(interval)
