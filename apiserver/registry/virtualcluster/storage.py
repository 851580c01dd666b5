"""The VirtualCluster's storage, as sample-apiserver's ``registry/<resource>/etcd.go`` fills the generic
store: the resource's Registry (the generic store with this resource's strategy and admission) and its
``kubeconfig`` subresource, both over the storage the server hands in.

Which storage that is (etcd behind the watch cache) is the server's to decide: the registry never sees
the cache (``storage.delegator`` decides between it and etcd, below the registry)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apiserver.registry.admission import Admission
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster.kubeconfig import KubeconfigREST
from apiserver.registry.virtualcluster.strategy import VirtualClusterStrategy
from apiserver.storage.interface import Storage
from apiserver.storage.secrets import SecretStore

__all__ = ["VirtualClusterStorage", "new_storage"]


@dataclass(frozen=True)
class VirtualClusterStorage:
    """What the server serves the resource with: the object and its ``status`` (``registry``), and the
    ``kubeconfig`` subresource (``kubeconfig``)."""

    registry: Registry
    kubeconfig: KubeconfigREST


def new_storage(storage: Storage, admission: Sequence[Admission] = (),
                secrets: SecretStore | None = None) -> VirtualClusterStorage:
    """The VirtualCluster's REST storage over ``storage``; ``secrets`` keeps the tenant PKIs the
    kubeconfig subresource mints from (None without a control-plane runtime: no credentials kept)."""
    registry = Registry(storage, VirtualClusterStrategy(), admission)
    return VirtualClusterStorage(registry, KubeconfigREST(registry, secrets))
