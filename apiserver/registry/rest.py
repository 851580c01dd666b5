"""The per-resource strategy contract, in the shape of k8s.io/apiserver's registry.

The generic :mod:`apiserver.registry.store` does everything every resource shares
(ObjectMeta, preconditions, finalizers, dry-run); a strategy holds only what is
particular to one resource: validation, defaulting/preparation, and its table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from apiserver.apis.resource import ResourceInfo
from apiserver.endpoints.negotiation import Column
from apiserver.machinery.errors import Cause

Obj = dict[str, Any]


class Strategy(Protocol):
    info: ResourceInfo
    columns: Sequence[Column]

    def prepare_for_create(self, obj: Obj) -> None:
        """Normalise a new object (drop status, set generation, add finalizers)."""

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """Keep what a main-resource write may not change; bump generation on spec change."""

    def prepare_for_status_update(self, new: Obj, old: Obj) -> Obj:
        """Return the object a status write produces: old with only the new status."""

    def validate(self, obj: Obj) -> list[Cause]:
        """Causes of a new object being invalid."""

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Causes of an update being invalid (including immutable fields)."""

    def validate_status(self, obj: Obj) -> list[Cause]:
        """Causes of a status being invalid."""

    def prune(self, obj: Obj) -> list[str]:
        """Drop the fields the schema does not know before storing (as a structural schema does);
        returns their paths, for fieldValidation."""

    def cells(self, obj: Obj) -> list[Any]:
        """One Table row."""
