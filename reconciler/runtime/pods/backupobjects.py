"""The ``pods`` runtime's snapshots as host objects: the claim that keeps them and the pods that take,
prune and restore them, built without a host call.

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

from reconciler.runtime.base import Obj
from reconciler.runtime.pods.hostobjects import ETCD_CLIENT, ETCD_PEER, HostObjects, Plan

__all__ = ["BACKUP_TIMEOUT", "SNAPSHOT_CLAIM", "prune_pod", "restore_pod", "save_pod", "snapshot_claim"]

SNAPSHOT_CLAIM = "virtualcluster-snapshots"
SNAPSHOT_ROOT = "/snapshots"
DATA_MOUNT = "/var/lib/etcd"  # the etcd StatefulSet's data claim, mounted here
DATA_DIR = f"{DATA_MOUNT}/data"
CERTS = "/etc/etcd/client"
BACKUP_TIMEOUT = 900.0  # seconds a snapshot or restore pod may take, start included


def snapshot_claim(namespace: str, labels: dict[str, str], size: str, storage_class: str | None) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": SNAPSHOT_CLAIM, "namespace": namespace, "labels": labels}, "spec": spec}


def save_pod(objects: HostObjects, plan: Plan, image: str, snapshot: str, time: str, keep: int) -> Obj:
    """Takes ``snapshot`` through etcd's Service with the apiserver's etcd client certificate."""
    args = ["save", "--root", SNAPSHOT_ROOT, "--namespace", plan.namespace, "--name", plan.name,
            "--snapshot", snapshot, "--time", time, "--keep", str(keep),
            "--endpoint", f"https://{plan.etcd_service_dns}:{ETCD_CLIENT}", "--cacert", f"{CERTS}/etcd-ca.crt",
            "--cert", f"{CERTS}/apiserver-etcd-client.crt", "--key", f"{CERTS}/apiserver-etcd-client.key"]
    return _pod(objects, plan, "snapshot", image, args, [_etcd_client_volume(plan.object_name("apiserver"))],
                [{"name": "etcd-client", "mountPath": CERTS, "readOnly": True}])


def prune_pod(objects: HostObjects, plan: Plan, image: str, keep: int) -> Obj:
    args = ["prune", "--root", SNAPSHOT_ROOT, "--namespace", plan.namespace, "--name", plan.name, "--keep", str(keep)]
    return _pod(objects, plan, "prune", image, args)


def restore_pod(objects: HostObjects, plan: Plan, image: str, index: int, origin: str, snapshot: str,
                label: str) -> Obj:
    """Writes etcd member ``index``'s data claim from ``origin``'s snapshot, reading the snapshots only."""
    member = objects.members(plan)[index]
    args = ["restore", "--snapshot", f"{SNAPSHOT_ROOT}/{plan.namespace}/{origin}/{snapshot}.db",
            "--data-dir", DATA_DIR, "--label", label, "--member", member,
            "--peer-url", f"https://{plan.etcd_member(index)}:{ETCD_PEER}",
            "--initial-cluster", objects.initial_cluster(plan), "--token", plan.cluster_token]
    claim = plan.member_claim(member)["metadata"]["name"]
    return _pod(objects, plan, f"restore-{index}", image, args,
                [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
                [{"name": "data", "mountPath": DATA_MOUNT}], read_only=True)


def _pod(objects: HostObjects, plan: Plan, verb: str, image: str, args: list[str], volumes: list[Obj] | None = None,
         mounts: list[Obj] | None = None, read_only: bool = False) -> Obj:
    """One ``python -m reconciler.backup`` pod on the snapshot volume, named ``<vc>-backup-<verb>``."""
    container = {"name": "backup", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["python", "-m", "reconciler.backup", *args],
                 "volumeMounts": [{"name": "snapshots", "mountPath": SNAPSHOT_ROOT, "readOnly": read_only},
                                  *(mounts or [])],
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                 "terminationMessagePolicy": "FallbackToLogsOnError"}
    snapshots = {"name": "snapshots", "persistentVolumeClaim": {"claimName": SNAPSHOT_CLAIM, "readOnly": read_only}}
    spec = {**objects.pod_spec(plan, "backup", container, [snapshots, *(volumes or [])]), "restartPolicy": "Never"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": objects.meta(plan, "backup", f"-{verb}"), "spec": spec}


def _etcd_client_volume(apiserver_secret: str) -> Obj:
    """The apiserver's etcd client certificate and the etcd CA, nothing else of its Secret."""
    return {"name": "etcd-client", "secret": {"secretName": apiserver_secret, "defaultMode": 0o400, "items": [
        {"key": k, "path": k} for k in ("etcd-ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key")]}}
