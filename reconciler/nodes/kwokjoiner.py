"""The kwok node joiner (playground and tests): a promoted host node appears in the tenant as a Node
that a per-tenant kwok keeps Ready and whose pods it runs.

The tenant Node carries the host node's name, labels (minus host roles and our claim),
capacity and allocatable. kwok runs beside the tenant's control plane (process runtime)
and is adopted across restarts like the other components.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, KubeClient
from apiserver.machinery.jsonutil import Obj
from reconciler.nodes.selection import CLAIM_LABEL, is_ready, labels, node_name
from reconciler.runtime.process import ProcessRuntime
from reconciler.tenantapi import remove_node

log = logging.getLogger(__name__)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
HOST_NODE_ANNOTATION = "kosmos.io/host-node"
DROPPED_LABEL_PREFIXES = ("node-role.kubernetes.io/", "node.kubernetes.io/exclude")


def tenant_node(host_node: Obj) -> Obj:
    """The tenant's view of a promoted host node."""
    kept = {k: v for k, v in labels(host_node).items()
            if k != CLAIM_LABEL and not k.startswith(DROPPED_LABEL_PREFIXES)}
    status = host_node.get("status") or {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name(host_node), "labels": kept,
                         "annotations": {KWOK_ANNOTATION: "fake", HOST_NODE_ANNOTATION: node_name(host_node)}},
            "status": {"capacity": status.get("capacity") or {}, "allocatable": status.get("allocatable") or {}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KwokJoiner:
    def __init__(self, runtime: ProcessRuntime) -> None:
        self.runtime = runtime

    def _ensure_kwok(self, vc: Obj) -> None:
        meta = VirtualCluster(vc).meta
        base = self.runtime.dir(meta.namespace, meta.name)
        if self.runtime.alive(self.runtime.pid(base, "kwok"), base):
            return
        command = [str(self.runtime.bin_dir / "kwok"), f"--kubeconfig={base / 'admin.kubeconfig'}",
                   # only the promoted nodes (annotated so): a shared slice's node is the syncer's
                   "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                   "--node-ip=127.0.0.1", f"--server-address=127.0.0.1:{_free_port()}",
                   "--cidr=10.244.0.1/16"]
        pid = self.runtime.spawn(base, "kwok", command)
        log.info("started kwok for %s (pid %d)", meta.key, pid)

    async def join(self, vc: Obj, tenant: KubeClient, host_node: Obj, current: Obj | None) -> bool:
        self._ensure_kwok(vc)
        node = current
        if node is None:
            try:
                node = await tenant.create("/api/v1/nodes", tenant_node(host_node))
            except HostError as e:
                if e.code != 409:
                    raise
                node = await tenant.get(f"/api/v1/nodes/{node_name(host_node)}")
        return is_ready(node)

    async def leave(self, vc: Obj, tenant: KubeClient | None, name: str, pods: list[Obj] | None = None) -> None:
        if tenant is not None:
            await remove_node(tenant, name, pods)

    async def stop(self, vc: Obj) -> None:
        meta = VirtualCluster(vc).meta
        base = self.runtime.dir(meta.namespace, meta.name)
        pid = self.runtime.pid(base, "kwok")
        if pid and self.runtime.alive(pid, base):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
