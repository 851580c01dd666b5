"""How ``spec.promoteResources.resources`` is served: the one reading that node selection, the table
and the shared-slice syncer share.

``resources`` (``{cpu: 10, memory: 100Gi}``) asks for compute, and ``resourcesMode`` says in what
form:

* ``Shared`` (the default, the k8s-in-k8s proposal's ClusterTree reading): a slice of the shared
  host. The tenant sees one virtual node of exactly that capacity; its pods run in the host, in a
  namespace of this VirtualCluster, under a ResourceQuota of that size. No host node is promoted
  for it.
* ``Dedicated``: free host nodes are promoted whole until their allocatable resources cover every
  amount.

``nodes``, ``nodeInfos`` and ``promotePolicies`` promote whole host nodes in either mode; a shared
slice may sit beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEDICATED", "DEFAULT_MODE", "RESOURCES_MODES", "SHARED", "dedicated_resources", "quantity_text",
           "resources_mode", "shared_slice"]

SHARED = "Shared"
DEDICATED = "Dedicated"
RESOURCES_MODES = (DEDICATED, SHARED)  # the enum, in the order its validation message lists it
DEFAULT_MODE = SHARED


def _promote_resources(spec: Mapping[str, Any] | None) -> Mapping[str, Any]:
    resources = (spec or {}).get("promoteResources") if isinstance(spec, Mapping) else None
    return resources if isinstance(resources, Mapping) else {}


def resources_mode(spec: Mapping[str, Any] | None) -> str:
    """``spec.promoteResources.resourcesMode``, :data:`SHARED` when absent (as the server defaults it;
    objects stored before the field existed are read the same way)."""
    mode = _promote_resources(spec).get("resourcesMode")
    return mode if mode in RESOURCES_MODES else DEFAULT_MODE


def quantity_text(value: Any) -> str:
    """A stored quantity (a JSON number or a string) as the string a Kubernetes object carries:
    ``10`` for ``10`` or ``10.0``, ``0.5``, ``100Gi``; surrounding spaces dropped."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _requested(spec: Mapping[str, Any] | None) -> dict[str, str]:
    resources = _promote_resources(spec).get("resources")
    if not isinstance(resources, Mapping):
        return {}
    return {str(name): quantity_text(q) for name, q in resources.items() if q is not None}


def shared_slice(spec: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The slice of the shared host this spec asks for (resource name → quantity), or None when it
    asks for none: no ``resources``, an empty map, or ``resourcesMode: Dedicated``."""
    requested = _requested(spec)
    if not requested or resources_mode(spec) != SHARED:
        return None
    return requested


def dedicated_resources(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """The amounts whole promoted host nodes must cover (``resourcesMode: Dedicated``); empty otherwise."""
    if resources_mode(spec) != DEDICATED:
        return {}
    return _requested(spec)
