"""The order a tenant control plane starts in: etcd; kube-apiserver once etcd's pods are ready; the
controller-manager (and the scheduler, when wanted) once the apiserver answers at the endpoint.

Started together, each crashes into the kubelet's restart back-off until what it needs answers.
kube-apiserver exits when etcd has not answered within its 20 s dial timeout, and its first lookup of
etcd's member name, made before the etcd pod has an address, is cached as "no such host" by the
cluster DNS for the negative TTL (30 s with kubeadm's Corefile), longer than that timeout.
kube-controller-manager exits at once when its apiserver does not answer. The back-off then decides
when they come back: 40-45 s to Ready where each waiting its turn takes a few.

A stage once reached is kept, and read back from the host by a new leader: a component that runs is
never scaled down because what it needs blinked.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from apiserver.apis.conditions import is_true
from reconciler.runtime.base import Obj
from reconciler.runtime.pods.host import Host
from reconciler.runtime.pods.hostobjects import Plan, selector

__all__ = ["StartOrder", "Stage"]

Tenant = tuple[str, str]


class Stage(enum.IntEnum):
    """How far a control plane may start."""

    ETCD = 0  # etcd only
    APISERVER = 1  # etcd and kube-apiserver
    ALL = 2  # every component


def replicas(workload: Obj | None) -> int:
    """The replicas a Deployment or StatefulSet asks for (0 when there is none)."""
    return int(((workload or {}).get("spec") or {}).get("replicas") or 0)


def ready(pod: Obj) -> bool:
    return is_true((pod.get("status") or {}).get("conditions"), "Ready") and not pod["metadata"].get("deletionTimestamp")


@dataclass
class StartOrder:
    """Per tenant, the stage its start reached; asked of the host until every component may run."""

    _reached: dict[Tenant, Stage] = field(default_factory=dict)

    async def stage(self, host: Host, plan: Plan, etcd_members: int) -> Stage:
        """The stage a pass applies: remembered once ALL; otherwise what the host's workloads and etcd's
        pods say (three reads and a list, only while a control plane starts)."""
        tenant = (plan.namespace, plan.name)
        if self._reached.get(tenant) == Stage.ALL:
            return Stage.ALL
        found = await self._on_host(host, plan, etcd_members)
        self._reached[tenant] = found
        return found

    def answered(self, plan: Plan) -> None:
        """The tenant apiserver answered: the rest of the control plane may start."""
        self._reached[(plan.namespace, plan.name)] = Stage.ALL

    def forget(self, tenant: Tenant) -> None:
        """A tenant that hibernates or goes starts in order again."""
        self._reached.pop(tenant, None)

    def clear(self) -> None:
        self._reached.clear()

    @staticmethod
    async def _on_host(host: Host, plan: Plan, etcd_members: int) -> Stage:
        for component in ("controller-manager", "scheduler"):
            if replicas(await host.get("Deployment", plan.namespace, plan.object_name(component))):
                return Stage.ALL
        if replicas(await host.get("Deployment", plan.namespace, plan.object_name("apiserver"))):
            return Stage.APISERVER
        etcd = await host.list("Pod", plan.namespace, selector(plan.name, "etcd"))
        return Stage.APISERVER if sum(map(ready, etcd)) >= etcd_members else Stage.ETCD
