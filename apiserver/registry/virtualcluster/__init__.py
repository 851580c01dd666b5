"""The VirtualCluster resource's registry, as sample-apiserver lays out ``registry/<resource>/``:
``strategy.py`` its rules, ``kubeconfig.py`` its ``kubeconfig`` subresource's storage, and
``storage.py`` the one constructor the server calls for both."""

from apiserver.registry.virtualcluster.kubeconfig import KubeconfigREST
from apiserver.registry.virtualcluster.storage import VirtualClusterStorage, new_storage
from apiserver.registry.virtualcluster.strategy import VirtualClusterStrategy, desired_nodes, ready_nodes

__all__ = ["KubeconfigREST", "VirtualClusterStorage", "VirtualClusterStrategy", "desired_nodes", "new_storage",
           "ready_nodes"]
