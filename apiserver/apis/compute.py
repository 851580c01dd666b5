"""What a VirtualCluster's spec asks of the host: whole host nodes, a slice of the shared host
(:mod:`.sharedslice`), or neither. One reading for node promotion, the status and the tenant's
scheduler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apiserver.apis.sharedslice import dedicated_resources, shared_slice

__all__ = ["asks_for_compute", "named_nodes", "requests_nodes"]


def requests_nodes(spec: Mapping[str, Any]) -> bool:
    """Whether the spec asks for any host node at all: by count, by name, or by resources in
    ``resourcesMode: Dedicated``. Resources in Shared mode (the default) are a slice of the shared host
    (:func:`apiserver.apis.sharedslice.shared_slice`): no host node is promoted for them."""
    resources = spec.get("promoteResources") or {}
    return (any(int(p.get("nodeCount") or 0) > 0 for p in spec.get("promotePolicies") or [])
            or bool(resources.get("nodes") or resources.get("nodeInfos") or dedicated_resources(spec)))


def asks_for_compute(spec: Mapping[str, Any] | None) -> bool:
    """Whether the spec gives the tenant compute: host nodes (by count, name or resources) or a slice."""
    return requests_nodes(spec or {}) or shared_slice(spec) is not None


def named_nodes(spec: Mapping[str, Any]) -> list[str]:
    """The nodes the spec names (``promoteResources.nodes``, then ``nodeInfos``), each once, in order."""
    resources = spec.get("promoteResources") or {}
    return list(dict.fromkeys([*(resources.get("nodes") or []),
                               *(i.get("nodeName", "") for i in resources.get("nodeInfos") or [])]))
