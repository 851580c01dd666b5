"""What each tenant's last full pass was built from, so that a pass over an unchanged tenant repeats nothing.

A ready tenant is checked every few seconds. Writing its files (the process runtime) or server-side
applying its host objects (the pods runtime) each time costs vc-apiserver, and the host, for every idle
tenant. A pass built from the same inputs within a while of the last full one skips that and only asks
the tenant apiserver's ``/readyz``; what was changed meanwhile (a file or an object edited by hand) is
undone at the next full pass.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["PassMemo"]

T = TypeVar("T")
Tenant = tuple[str, str]  # (namespace, name)


@dataclass
class PassMemo(Generic[T]):
    """Per tenant: the inputs of its last full pass, when it started, and what it found."""

    _last: dict[Tenant, tuple[Hashable, float, T]] = field(default_factory=dict)

    def recall(self, tenant: Tenant, inputs: Hashable, within: float) -> T | None:
        """What the last full pass found, if it was built from ``inputs`` less than ``within`` seconds ago."""
        last = self._last.get(tenant)
        if last is None or last[0] != inputs or time.monotonic() - last[1] >= within:
            return None
        return last[2]

    def remember(self, tenant: Tenant, inputs: Hashable, started: float, found: T) -> None:
        self._last[tenant] = (inputs, started, found)

    def forget(self, tenant: Tenant) -> None:
        """For a tenant that stops or goes: its next pass is a full one."""
        self._last.pop(tenant, None)

    def clear(self) -> None:
        """For a leader that steps down: another may change every tenant meanwhile."""
        self._last.clear()
