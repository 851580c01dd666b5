"""The ``pods`` runtime: tenant control planes as workloads in the host cluster (:mod:`.runtime`)."""

from reconciler.runtime.pods.hostobjects import COMPONENT, ETCD_IMAGE, KUBERNETES_VERSION, MANAGED_BY, OWNER
from reconciler.runtime.pods.runtime import PodsRuntime
from reconciler.runtime.pods.supervisor import OWNED_KINDS

__all__ = ["COMPONENT", "ETCD_IMAGE", "KUBERNETES_VERSION", "MANAGED_BY", "OWNED_KINDS", "OWNER", "PodsRuntime"]
