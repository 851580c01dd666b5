"""The ``pods`` runtime's snapshots: where they are kept on the host, and the pods that take and restore them.

Each namespace with VirtualClusters gets one PersistentVolumeClaim, ``virtualcluster-snapshots``,
holding ``<namespace>/<virtualcluster>/<snapshot>.db`` (and its record) as the ``process`` runtime's
snapshot directory does. It carries no VirtualCluster's label, so deleting one leaves it: snapshots
are backups, and a deleted cluster is restored from them. A restore or clone is always in the same
namespace, so it finds them there.

Snapshots are taken, pruned and restored by short-lived pods of vc-apiserver's image
(``python -m reconciler.backup``) on the control-plane nodes, beside the tenant's etcd: the
snapshot mounts the apiserver's etcd client certificate and reaches etcd through its Service, the
restore writes a member's data claim before its StatefulSet first starts.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

SNAPSHOT_CLAIM = "virtualcluster-snapshots"
SNAPSHOT_ROOT = "/snapshots"
DATA_MOUNT = "/var/lib/etcd"  # the etcd StatefulSet's data claim, mounted here
DATA_DIR = f"{DATA_MOUNT}/data"
CERTS = "/etc/etcd/client"
BACKUP_TIMEOUT = 900.0  # seconds a snapshot or restore pod may take, start included
POLL = 0.5


def snapshot_claim(namespace: str, labels: dict[str, str], size: str, storage_class: str | None) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": SNAPSHOT_CLAIM, "namespace": namespace, "labels": labels}, "spec": spec}


def snapshot_volume(read_only: bool = False) -> Obj:
    return {"name": "snapshots", "persistentVolumeClaim": {"claimName": SNAPSHOT_CLAIM, "readOnly": read_only}}


def etcd_client_volume(apiserver_secret: str) -> Obj:
    """The apiserver's etcd client certificate and the etcd CA, nothing else of its Secret."""
    return {"name": "etcd-client", "secret": {"secretName": apiserver_secret, "defaultMode": 0o400, "items": [
        {"key": k, "path": k} for k in ("etcd-ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key")]}}


def save_args(namespace: str, name: str, snapshot: str, time: str, keep: int, endpoint: str) -> list[str]:
    return ["save", "--root", SNAPSHOT_ROOT, "--namespace", namespace, "--name", name, "--snapshot", snapshot,
            "--time", time, "--keep", str(keep), "--endpoint", endpoint, "--cacert", f"{CERTS}/etcd-ca.crt",
            "--cert", f"{CERTS}/apiserver-etcd-client.crt", "--key", f"{CERTS}/apiserver-etcd-client.key"]


def prune_args(namespace: str, name: str, keep: int) -> list[str]:
    return ["prune", "--root", SNAPSHOT_ROOT, "--namespace", namespace, "--name", name, "--keep", str(keep)]


def restore_args(namespace: str, origin: str, snapshot: str, label: str, member: str, peer_url: str,
                 initial_cluster: str, token: str) -> list[str]:
    return ["restore", "--snapshot", f"{SNAPSHOT_ROOT}/{namespace}/{origin}/{snapshot}.db", "--data-dir", DATA_DIR,
            "--label", label, "--member", member, "--peer-url", peer_url, "--initial-cluster", initial_cluster,
            "--token", token]


def container(image: str, args: list[str], mounts: list[Obj]) -> Obj:
    return {"name": "backup", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["python", "-m", "reconciler.backup", *args], "volumeMounts": mounts,
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            "terminationMessagePolicy": "FallbackToLogsOnError"}
