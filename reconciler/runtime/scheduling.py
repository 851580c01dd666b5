"""When a tenant's kube-scheduler runs: once there is something to schedule or somewhere to schedule it.

A tenant without nodes and without pods has no use for a scheduler, and it is the one component such a
tenant can go without: at 30 idle tenants it is about 13 MiB of each tenant's memory (docs/benchmarks.md).
So both runtimes start it when the spec asks for compute (promoted nodes or a shared slice), when a node
has joined the tenant (by promotion, or by hand with the admin credential), or when a pod waits for a
node. A pod created in a tenant without nodes therefore still gets its ``PodScheduled=False`` condition
and its ``FailedScheduling`` event, from a scheduler started for it at the next pass. Once started, a
scheduler runs until the tenant stops (hibernation, deletion): it is not stopped when the work is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from apiserver.apis.compute import asks_for_compute
from apiserver.apis.conditions import find_condition
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient

__all__ = ["Scheduling", "something_to_schedule", "was_ready"]

log = logging.getLogger(__name__)

Tenant = tuple[str, str]  # (namespace, name)
ASK_TIMEOUT = 3.0  # seconds, as the readiness checks wait


def was_ready(vc: Mapping[str, Any]) -> bool:
    """Whether the VirtualCluster's status last said its control plane was ready: only then is the tenant
    apiserver asked before its scheduler is applied (one still starting has nothing scheduled)."""
    cond = find_condition((vc.get("status") or {}).get("conditions"), "ControlPlaneReady")
    return cond is not None and cond.get("status") == "True"


async def something_to_schedule(tenant: KubeClient) -> bool:
    """Whether the tenant has a node, or a pod without one. Two reads of at most one object each; a
    tenant that does not answer has nothing known to schedule yet (it is asked again next pass)."""
    try:
        if (await tenant.request("GET", "/api/v1/nodes", params={"limit": "1"}, timeout=ASK_TIMEOUT)).get("items"):
            return True
        pending = await tenant.request("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=", "limit": "1"},
                                       timeout=ASK_TIMEOUT)
        return bool(pending.get("items"))
    except (HostError, HostUnavailable) as e:
        log.debug("could not tell whether the tenant at %s has anything to schedule: %s", tenant.server, e)
        return False


class Scheduling:
    """Per tenant, whether its scheduler runs. Kept from pass to pass, so a tenant whose scheduler runs
    is not asked again; forgotten when the tenant stops or this server stops leading."""

    def __init__(self) -> None:
        self._on: set[Tenant] = set()

    def known(self, tenant: Tenant, vc: Mapping[str, Any]) -> bool:
        """What is known without asking the tenant: started before, or the spec asks for compute."""
        if tenant not in self._on and asks_for_compute(vc.get("spec")):
            self._on.add(tenant)
        return tenant in self._on

    async def wanted(self, tenant: Tenant, vc: Mapping[str, Any], client: KubeClient) -> bool:
        """``known``, else whether the tenant apiserver has something to schedule."""
        if self.known(tenant, vc):
            return True
        if await something_to_schedule(client):
            log.info("%s/%s has something to schedule: its kube-scheduler starts", *tenant)
            self._on.add(tenant)
            return True
        return False

    def start(self, tenant: Tenant) -> None:
        """A scheduler found running (the process runtime's pid file): it keeps running."""
        self._on.add(tenant)

    def forget(self, tenant: Tenant) -> None:
        self._on.discard(tenant)

    def clear(self) -> None:
        self._on.clear()
