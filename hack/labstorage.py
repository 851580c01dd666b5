"""The real-node lab's storage: rancher's local-path-provisioner (built from the Go module proxy, imaged by
hack/images), provisioning a node-local volume for each claim of the default StorageClass on the node its
pod is scheduled to, and removing it when the claim goes (reclaim policy Delete). A deleted tenant gives
its space back, so the lab holds as many tenants as its disk allows.

Each node's volumes live under its own root (``<node>/volumes``): the lab's nodes share the machine's
filesystem, a real node has its own disk. The volumes are of type ``local`` (the StorageClass's
``defaultVolumeType``), as the statically provisioned ones were.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reconciler import versions

NAMESPACE = "local-path-storage"
ACCOUNT = "local-path-provisioner-service-account"
PROVISIONER = "rancher.io/local-path"
IMAGE = f"docker.io/rancher/local-path-provisioner:{versions.LOCAL_PATH_PROVISIONER_VERSION}"
HELPER_IMAGE = "docker.io/library/busybox:1.36"
NAME = "local-path-provisioner"

Obj = dict[str, Any]

# The helper pod runs these on the volume's node with its parent directory mounted (upstream's scripts).
SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'
HELPER_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
              "spec": {"containers": [{"name": "helper-pod", "image": HELPER_IMAGE, "imagePullPolicy": "IfNotPresent"}]}}


def objects(storage_class: str, node_paths: dict[str, Path], affinity: Obj) -> list[Obj]:
    """Everything the provisioner needs, and ``storage_class`` as the default class; it runs where
    ``affinity`` allows (the real nodes)."""
    meta = {"namespace": NAMESPACE}
    config = {"nodePathMap": [{"node": node, "paths": [str(path)]} for node, path in sorted(node_paths.items())]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": NAME, **meta},
         "rules": [{"apiGroups": [""], "resources": ["pods"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NAME},
         "rules": [{"apiGroups": [""], "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
                    "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
                   {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                   {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]}]},
        _binding("RoleBinding", meta),
        _binding("ClusterRoleBinding", {}),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local-path-config", **meta},
         "data": {"config.json": json.dumps(config, indent=2), "setup": SETUP, "teardown": TEARDOWN,
                  "helperPod.yaml": json.dumps(HELPER_POD)}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, **meta},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": NAME}},
                  "template": {"metadata": {"labels": {"app": NAME}}, "spec": {
                      "serviceAccountName": ACCOUNT, "affinity": {"nodeAffinity": affinity},
                      "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                                       "effect": "NoSchedule"}],
                      "containers": [{
                          "name": NAME, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                          "command": [NAME, "start", "--config", "/etc/config/config.json",
                                      "--provisioner-name", PROVISIONER, "--helper-image", HELPER_IMAGE],
                          "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                  {"name": "CONFIG_MOUNT_PATH", "value": "/etc/config/"}],
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/config/"}]}],
                      "volumes": [{"name": "config", "configMap": {"name": "local-path-config"}}]}}}},
        storage_class_object(storage_class),
    ]


def storage_class_object(name: str) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "annotations": {"storageclass.kubernetes.io/is-default-class": "true",
                                                       "defaultVolumeType": "local"}},
            "provisioner": PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
            "allowVolumeExpansion": False}


def _binding(kind: str, meta: Obj) -> Obj:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": NAME, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind.removesuffix("Binding"), "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]}
