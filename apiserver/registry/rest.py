"""What the generic store and a resource agree on, in the shape of k8s.io/apiserver's ``registry/rest``:
the per-resource :class:`Strategy`, the options a write carries, and what a write returns.

The generic :mod:`apiserver.registry.store` does everything every resource shares
(ObjectMeta, preconditions, finalizers, dry-run); a strategy holds only what is
particular to one resource: validation, defaulting/preparation, and its table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from apiserver.apis.resource import ResourceInfo
from apiserver.machinery.errors import FIELD_VALUE_INVALID, Cause
from apiserver.machinery.fieldpath import Type
from apiserver.machinery.golang import go_bad_value
from apiserver.machinery.jsonutil import Obj, json_copy
from apiserver.storage.interface import ListOptions

if TYPE_CHECKING:
    from apiserver.auth.authn import UserInfo

__all__ = ["Column", "DeleteOptions", "ListOptions", "Obj", "Result", "Strategy", "UpdatedObject",
           "WriteOptions", "keep_status", "status_update", "validate_type_meta"]

UpdatedObject = Callable[[Obj], Awaitable[Obj]]
"""An update as a function of the current object (a patch is one; a PUT is the constant function)."""


@dataclass
class WriteOptions:
    """kube's CreateOptions/UpdateOptions/PatchOptions (fieldValidation is applied by the decoder)."""

    dry_run: bool = False
    field_validation: str = "Warn"  # Strict | Warn | Ignore
    field_manager: str = ""  # the manager of managedFields entries: fieldManager, else from the User-Agent
    force: bool = False  # apply only: take over the fields of conflicting managers
    user: UserInfo | None = None  # who asks (what admission may authorize); None: the server itself


@dataclass
class DeleteOptions:
    """The DeleteOptions a client sent (body and query), decoded."""

    dry_run: bool = False
    dry_run_values: list[Any] = field(default_factory=list)  # as sent (validated: only "All")
    uid: str | None = None  # preconditions
    resource_version: str | None = None
    propagation_policy: str | None = None
    grace_period_seconds: int | None = None


@dataclass
class Result:
    obj: Obj
    warnings: list[str] = field(default_factory=list)
    created: bool = False


@dataclass(frozen=True)
class Column:
    """One column of the resource's Table (its ``additionalPrinterColumns``)."""

    name: str
    type: str
    description: str
    format: str = ""
    priority: int = 0

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


class Strategy(Protocol):
    info: ResourceInfo
    columns: Sequence[Column]
    field_type: Type  # how field management splits an object into fields (from the schema)

    def prepare_for_create(self, obj: Obj) -> None:
        """Normalise a new object (drop status, set generation, add finalizers)."""

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """Keep what a main-resource write may not change; bump generation on spec change."""

    def prepare_for_status_update(self, new: Obj, old: Obj) -> Obj:
        """Return the object a status write produces: old with only the new status."""

    def warnings_on_create(self, obj: Obj) -> list[str]:
        """Warnings for a client about a new object that is valid."""

    def warnings_on_update(self, new: Obj, old: Obj) -> list[str]:
        """Warnings for a client about an update that is valid."""

    def validate_type(self, obj: Obj) -> list[Cause]:
        """Causes of an object not being this resource's kind and group-version (when there are
        any, nothing else is judged)."""

    def validate(self, obj: Obj) -> list[Cause]:
        """Causes of a new object being invalid."""

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Causes of an update being invalid (including immutable fields)."""

    def validate_status(self, obj: Obj) -> list[Cause]:
        """Causes of a status being invalid."""

    def prune(self, obj: Obj) -> list[str]:
        """Drop the fields the schema does not know before storing and fill in declared defaults (as a
        structural schema prunes and defaults); returns the dropped paths, for fieldValidation."""

    def cells(self, obj: Obj) -> list[Any]:
        """One Table row."""


# -- what every strategy here does the same way ---------------------------------------------

def validate_type_meta(info: ResourceInfo, obj: Obj) -> list[Cause]:
    """The CRD validator's ``ValidateTypeMeta``: this kind in this group-version, or nothing else is judged."""
    causes = []
    if obj.get("kind") != info.kind:
        causes.append(Cause(FIELD_VALUE_INVALID, f"Invalid value: {go_bad_value(obj.get('kind'))}: must be "
                                                 f"{info.kind}", "kind"))
    if obj.get("apiVersion") != info.group_version:
        causes.append(Cause(FIELD_VALUE_INVALID, f"Invalid value: {go_bad_value(obj.get('apiVersion'))}: must be "
                                                 f"{info.group_version}", "apiVersion"))
    return causes


def keep_status(new: Obj, old: Obj) -> None:
    """A write of the main resource leaves the status as it was."""
    if "status" in old:
        new["status"] = json_copy(old["status"])
    else:
        new.pop("status", None)


def status_update(new: Obj, old: Obj) -> Obj:
    """What a write of the status subresource stores: ``old`` with only ``new``'s status."""
    out = json_copy(old)
    out["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion")
    if new.get("status") is None:
        out.pop("status", None)
    else:
        out["status"] = new["status"]
    return out
