"""Timer slack: how late Linux may wake a thread from a timed sleep, so that wakes due close together
fall into one.

A settled tenant's processes are idle but for their timers: Go's runtime, every work queue's metrics
loop, raft's tick, lease renewals. Each timer that fires on its own is a wake of its process, and a
wake costs more than the work it finds. With a slack of some milliseconds the kernel fires a timer
anywhere in that window, together with the other timers already due, and Go's runtime then serves
every timer of the process that has come due in one wake. Requests are not timers: a packet wakes
its reader as before.

The slack is a value of each thread that a child inherits when it is forked and keeps across exec, so
the runtime sets it on the thread that starts a component and puts the old value back right after.
Only the process runtime starts processes itself; the pods runtime leaves its containers the slack
their node gives them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
from collections.abc import Callable, Iterator

__all__ = ["inherited_timer_slack", "timer_slack"]

log = logging.getLogger(__name__)

PR_SET_TIMERSLACK = 29  # linux/prctl.h
PR_GET_TIMERSLACK = 30


def _load_prctl() -> Callable[..., int] | None:
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # the C library the interpreter runs on
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int  # -1 and errno when refused
    return prctl  # type: ignore[no-any-return]


_prctl = _load_prctl()


def timer_slack() -> int:
    """The calling thread's timer slack in nanoseconds; 0 where the platform has none."""
    return max(0, _prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)) if _prctl is not None else 0


@contextlib.contextmanager
def inherited_timer_slack(nanoseconds: int) -> Iterator[None]:
    """Processes started inside get ``nanoseconds`` of timer slack (0: whatever this thread has).

    Where the kernel refuses, they start without it: a tenant is the same, only its idle costs more."""
    prctl = _prctl if nanoseconds else None
    before = timer_slack() if prctl is not None else 0
    if prctl is not None and prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) != 0:
        log.warning("could not set a timer slack of %d ns: errno %d", nanoseconds, ctypes.get_errno())
        prctl = None
    try:
        yield
    finally:
        if prctl is not None:
            prctl(PR_SET_TIMERSLACK, before, 0, 0, 0)
