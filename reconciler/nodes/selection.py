"""Which host nodes a VirtualCluster should have: pure logic over the spec and the host's nodes.

Deterministic (same spec + same host → same nodes), sticky (a node already assigned
stays while a rule still wants it) and honest about shortages (how many are needed,
how many are free, which named nodes are missing or taken).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from apiserver.apis import kubeversion
from apiserver.apis.compute import named_nodes
from apiserver.apis.conditions import is_true
from apiserver.apis.sharedslice import dedicated_resources
from apiserver.machinery.quantity import QuantityError, parse_quantity
from apiserver.machinery.selectors import LabelSelector, selector_from_label_selector

CLAIM_LABEL = "kosmos.io/virtualcluster"
CLAIM_ANNOTATION = "kosmos.io/virtualcluster"
CLAIMED_AT = "kosmos.io/claimed-at"
WAS_UNSCHEDULABLE = "kosmos.io/was-unschedulable"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# On a host Namespace, set by the platform team (a namespace admin cannot edit its Namespace): the label
# selector of the host nodes VirtualClusters of that namespace may take. Absent: any free node.
PROMOTABLE_NODES = "kosmos.io/promotable-nodes"

Node = Mapping[str, Any]


def claim_value(namespace: str, name: str) -> str:
    """A label value naming the VirtualCluster: ``ns.name``, hashed when over 63 characters."""
    value = f"{namespace}.{name}"
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"{namespace[:25]}.{name[:25]}-{digest}"


def labels(node: Node) -> Mapping[str, str]:
    return node.get("metadata", {}).get("labels") or {}


def annotations(node: Node) -> Mapping[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def node_name(node: Node) -> str:
    return str(node.get("metadata", {}).get("name", ""))


def claim_of(node: Node) -> str:
    """The full ``namespace/name`` that claims a node, or ''."""
    return annotations(node).get(CLAIM_ANNOTATION, "") if labels(node).get(CLAIM_LABEL) else ""


def is_ready(node: Node) -> bool:
    return is_true((node.get("status") or {}).get("conditions"), "Ready")


def is_control_plane(node: Node) -> bool:
    return any(k in labels(node) for k in CONTROL_PLANE_LABELS)


def free(node: Node) -> bool:
    """Eligible for a new claim: Ready, a worker, claimed by nobody, not cordoned by someone."""
    return (is_ready(node) and not is_control_plane(node) and not claim_of(node)
            and not (node.get("spec") or {}).get("unschedulable"))


def kubelet_newer(node: Node, tenant_version: str | None) -> str:
    """The node's kubelet version when it is of a newer minor than ``tenant_version``
    (:func:`apiserver.apis.kubeversion.kubelet_newer`), else ''."""
    version = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    return version if kubeversion.kubelet_newer(version, kubeversion.parse(tenant_version)) else ""


def still_chosen(spec: Mapping[str, Any], seen: Node, now: Node) -> bool:
    """Whether a node the plan chose as ``seen``, read again as ``now`` after it changed, would be chosen
    the same way: still free, matched or not by each promote policy's selector as before (labels added
    elsewhere, as the host's node lifecycle controller adds the ``beta.kubernetes.io`` ones, keep it),
    and, where the spec asks for resources, with the allocatable the plan counted."""
    if not free(now):
        return False
    for policy in spec.get("promotePolicies") or []:
        if int(policy.get("nodeCount") or 0) > 0:
            selector = selector_from_label_selector(policy.get("labelSelector"))
            if selector.matches(labels(seen)) != selector.matches(labels(now)):
                return False
    return not dedicated_resources(spec) or (
        (now.get("status") or {}).get("allocatable") == (seen.get("status") or {}).get("allocatable"))


def allocatable(node: Node, resource: str) -> Decimal:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if value is None:
        return Decimal(0)
    try:
        return parse_quantity(str(value))
    except QuantityError:
        return Decimal(0)


@dataclass
class Plan:
    """The outcome: nodes to keep, to claim, to release, and what could not be satisfied."""

    keep: list[str] = field(default_factory=list)
    claim: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    shortages: list[str] = field(default_factory=list)

    @property
    def wanted(self) -> list[str]:
        return self.keep + self.claim

    @property
    def satisfied(self) -> bool:
        return not self.shortages


def _assigned_order(nodes: Iterable[Node]) -> list[Node]:
    """Oldest claim first (kept longest); name breaks ties so the order is stable."""
    return sorted(nodes, key=lambda n: (annotations(n).get(CLAIMED_AT, ""), node_name(n)))


def plan(spec: Mapping[str, Any], host_nodes: Sequence[Node], owner: str,
         allowed: LabelSelector | None = None, version: str | None = None) -> Plan:
    """Nodes for the VirtualCluster ``owner`` (``namespace/name``) given the host's nodes now; ``allowed``
    (its namespace's :data:`PROMOTABLE_NODES`) bounds the nodes it may newly take (those it holds stay), and
    so does the tenant's Kubernetes ``version``: no node whose kubelet is newer is newly taken."""
    by_name = {node_name(n): n for n in host_nodes}
    mine = _assigned_order(n for n in host_nodes if claim_of(n) == owner)
    available = sorted((n for n in host_nodes if free(n) and (allowed is None or allowed.matches(labels(n)))
                        and not kubelet_newer(n, version)), key=node_name)
    chosen: list[str] = []
    result = Plan()

    def take(node: Node) -> None:
        name = node_name(node)
        chosen.append(name)
        (result.keep if claim_of(node) == owner else result.claim).append(name)

    for name in named_nodes(spec):
        node = by_name.get(name)
        if node is None:
            result.shortages.append(f"node {name} does not exist")
        elif claim_of(node) == owner or (free(node) and not kubelet_newer(node, version)
                                         and (allowed is None or allowed.matches(labels(node)))):
            take(node)
        elif free(node) and kubelet_newer(node, version):
            result.shortages.append(f"node {name} runs kubelet {kubelet_newer(node, version)}, newer than the "
                                    f"tenant's {version}")
        elif free(node):
            result.shortages.append(f"node {name} is not among the nodes this namespace may take "
                                    f"({PROMOTABLE_NODES}: {allowed.to_string() if allowed else ''})")
        elif claim_of(node):
            result.shortages.append(f"node {name} is claimed by {claim_of(node)}")
        elif is_control_plane(node):
            result.shortages.append(f"node {name} is a control-plane node")
        else:
            result.shortages.append(f"node {name} is not ready or is cordoned")

    for index, policy in enumerate(spec.get("promotePolicies") or []):
        want = int(policy.get("nodeCount") or 0)
        selector = selector_from_label_selector(policy.get("labelSelector"))
        candidates = [n for n in mine if node_name(n) not in chosen and selector.matches(labels(n))]
        candidates += [n for n in available if node_name(n) not in chosen and selector.matches(labels(n))]
        free_count = sum(1 for n in candidates if claim_of(n) != owner)  # counted before taking any
        for node in candidates[:want]:
            take(node)
        if len(candidates) < want:
            result.shortages.append(
                f"promotePolicies[{index}] needs {want} node(s) matching "
                f"{selector.to_string() or 'any labels'}, {len(candidates)} available ({free_count} free)")

    wanted_resources = dedicated_resources(spec)  # a shared slice promotes no host node
    if wanted_resources:
        needed = {r: parse_quantity(str(q)) for r, q in wanted_resources.items()}

        def covered() -> bool:
            return all(sum((allocatable(by_name[n], r) for n in chosen), Decimal(0)) >= q for r, q in needed.items())
        for node in [*(n for n in mine if node_name(n) not in chosen),
                     *(n for n in available if node_name(n) not in chosen)]:
            if covered():
                break
            take(node)
        if not covered():
            missing = ", ".join(f"{r}={q}" for r, q in wanted_resources.items())
            result.shortages.append(f"promoteResources.resources needs {missing}; free nodes do not cover it")

    if result.shortages:
        # All or nothing: while the spec cannot be met, claim no new node (keep what is held). A partial
        # claim would drain host nodes for a cluster that still waits, and two clusters each holding part
        # of what they need would wait for each other forever.
        result.claim = []
    result.release = [node_name(n) for n in reversed(mine) if node_name(n) not in chosen]
    return result
