"""The pure half of a slice: tenant pod → host pod, host pod status → tenant pod status, and the
host objects (namespace, quota, limits) and the tenant Node a slice consists of. No I/O here."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field

import orjson

from apiserver.apis.conditions import find_condition, is_true
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.jsonutil import Obj
from reconciler.shared import names
from reconciler.shared.names import NODE_NAME
from reconciler.shared.placement import Placement

PODS = "110"
EPHEMERAL_STORAGE = "100Gi"
DEFAULT_REQUEST = {"cpu": "100m", "memory": "128Mi"}  # a container without requests, in the host's quota
# Scheduling and identity fields that could reach other tenants' or the host's machinery.
STRIPPED = ("nodeName", "nodeSelector", "affinity", "topologySpreadConstraints", "tolerations", "priorityClassName",
            "priority", "preemptionPolicy", "schedulerName", "runtimeClassName", "serviceAccountName",
            "serviceAccount", "subdomain", "overhead", "schedulingGates", "resourceClaims")
REFUSED_VOLUMES = ("persistentVolumeClaim", "hostPath", "ephemeral", "csi", "iscsi", "nfs", "rbd", "cephfs",
                   "glusterfs", "fc", "flexVolume", "local")
TENANT_OWNED_CONDITIONS = ("PodScheduled",)


class Refused(Exception):
    """The pod cannot run in a slice (the reason is the tenant pod's condition and Event)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


# -- the host's side of a slice ------------------------------------------------------------------

def namespace(vc: Obj) -> Obj:
    """The slice's namespace; Pod Security `baseline` refuses hostNetwork, hostPID, privileged and
    hostPath pods whatever the tenant asks."""
    labels = {**names.markers(vc), "pod-security.kubernetes.io/enforce": "baseline",
              "pod-security.kubernetes.io/warn": "baseline"}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": names.host_namespace(vc), "labels": labels,
                         "annotations": names.identity(vc, "VirtualCluster")}}


def quota(vc: Obj, slice_: dict[str, str], pods: str = PODS) -> Obj:
    """The authority over the slice: requests of cpu, memory and any extended resource, and pods."""
    hard = {("pods" if r == "pods" else f"requests.{r}"): str(q) for r, q in slice_.items()}
    hard.setdefault("pods", pods)
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": names.QUOTA, "namespace": names.host_namespace(vc), "labels": names.markers(vc)},
            "spec": {"hard": hard}}


def limit_range(vc: Obj, default_request: dict[str, str] | None = None) -> Obj:
    """Requests for containers that state none, so best-effort tenant pods pass the quota's admission."""
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": names.LIMIT_RANGE, "namespace": names.host_namespace(vc),
                         "labels": names.markers(vc)},
            "spec": {"limits": [{"type": "Container", "defaultRequest": dict(default_request or DEFAULT_REQUEST)}]}}


# -- the tenant's node ---------------------------------------------------------------------------

def capacity(slice_: dict[str, str], pods: str = PODS) -> dict[str, str]:
    return {"ephemeral-storage": EPHEMERAL_STORAGE, "pods": pods, **{r: str(q) for r, q in slice_.items()}}


def node(vc: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE_NAME,
                         "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", names.SHARED_NODE: "true",
                                    names.VC_UID: VirtualCluster(vc).meta.uid}}}


def node_status(slice_: dict[str, str], ready: bool, reason: str, message: str, now: str, version: str,
                previous: Obj | None = None) -> Obj:
    """Capacity and allocatable are the slice, exactly; Ready says whether the host can run its pods."""
    cap = capacity(slice_)
    old = find_condition(((previous or {}).get("status") or {}).get("conditions"), "Ready") or {}
    status = "True" if ready else "False"
    changed = old.get("status") != status
    ready_condition = {"type": "Ready", "status": status, "reason": reason, "message": message,
                       "lastHeartbeatTime": now,
                       "lastTransitionTime": now if changed or not old.get("lastTransitionTime")
                       else old["lastTransitionTime"]}
    pressure = [{"type": t, "status": "False", "reason": f"No{t}", "message": "the host quota bounds the slice",
                 "lastHeartbeatTime": now, "lastTransitionTime": now} for t in ("MemoryPressure", "DiskPressure",
                                                                                  "PIDPressure")]
    return {"capacity": cap, "allocatable": cap, "conditions": [*pressure, ready_condition],
            "addresses": [{"type": "Hostname", "address": NODE_NAME}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"kubeletVersion": version, "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "shared-slice://host",
                         "kernelVersion": "", "osImage": "shared slice of the host", "machineID": "",
                         "systemUUID": "", "bootID": ""}}


def lease(now_micro: str, holder: str = NODE_NAME, duration: int = 40) -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": NODE_NAME, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": now_micro}}


# -- pods, down ----------------------------------------------------------------------------------

@dataclass
class References:
    """The ConfigMaps and Secrets a pod needs, by tenant name, and whether each is optional."""

    configmaps: dict[str, bool] = field(default_factory=dict)
    secrets: dict[str, bool] = field(default_factory=dict)

    def add(self, kind: str, name: str, optional: bool | None) -> None:
        into = self.configmaps if kind == "ConfigMap" else self.secrets
        into[name] = into.get(name, True) and bool(optional)


def _containers(spec: Obj) -> list[Obj]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def _is_token_volume(volume: Obj) -> bool:
    """The tenant's kube-api-access-* volume: a service account token for the tenant's apiserver, which
    pods in a slice cannot reach yet (Services and DNS are the next cut)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in s for s in sources)


def references(pod: Obj) -> References:
    refs = References()
    spec = pod.get("spec") or {}
    for v in spec.get("volumes") or []:
        if _is_token_volume(v):
            continue
        if "configMap" in v:
            refs.add("ConfigMap", v["configMap"].get("name", ""), v["configMap"].get("optional"))
        if "secret" in v:
            refs.add("Secret", v["secret"].get("secretName", ""), v["secret"].get("optional"))
        for s in (v.get("projected") or {}).get("sources") or []:
            if "configMap" in s:
                refs.add("ConfigMap", s["configMap"].get("name", ""), s["configMap"].get("optional"))
            if "secret" in s:
                refs.add("Secret", s["secret"].get("name", ""), s["secret"].get("optional"))
    for c in _containers(spec):
        for e in c.get("env") or []:
            source = e.get("valueFrom") or {}
            if "configMapKeyRef" in source:
                refs.add("ConfigMap", source["configMapKeyRef"].get("name", ""), source["configMapKeyRef"].get("optional"))
            if "secretKeyRef" in source:
                refs.add("Secret", source["secretKeyRef"].get("name", ""), source["secretKeyRef"].get("optional"))
        for e in c.get("envFrom") or []:
            if "configMapRef" in e:
                refs.add("ConfigMap", e["configMapRef"].get("name", ""), e["configMapRef"].get("optional"))
            if "secretRef" in e:
                refs.add("Secret", e["secretRef"].get("name", ""), e["secretRef"].get("optional"))
    for s in spec.get("imagePullSecrets") or []:
        refs.add("Secret", s.get("name", ""), False)
    refs.configmaps.pop("", None)
    refs.secrets.pop("", None)
    return refs


_DOWNWARD = {"metadata.name": names.TENANT_NAME, "metadata.namespace": names.TENANT_NAMESPACE,
             "metadata.uid": names.TENANT_UID, "metadata.labels": names.TENANT_LABELS,
             "metadata.annotations": names.TENANT_ANNOTATIONS}


def _field_path(path: str) -> str:
    """A downward-API path of the tenant pod, read from the host pod's annotations."""
    if path in _DOWNWARD:
        return f"metadata.annotations['{_DOWNWARD[path]}']"
    return path


def host_pod(vc: Obj, pod: Obj, placement: Placement | None = None) -> Obj:
    """The host's pod for a tenant pod bound to the slice's node (:class:`Refused` when it cannot run
    there). Tenant labels and annotations stay out of the host's metadata, where they could steer host
    Services or policies; they travel as annotations for the downward API."""
    meta = pod["metadata"]
    ns, name = meta["namespace"], meta["name"]
    spec = copy.deepcopy(pod.get("spec") or {})
    volumes = []
    dropped = set()
    for v in spec.get("volumes") or []:
        if _is_token_volume(v):
            dropped.add(v["name"])
            continue
        refused = next((k for k in REFUSED_VOLUMES if k in v), None)
        if refused:
            raise Refused("ProviderFailed", f"volume {v.get('name')!r}: {refused} volumes cannot run in a shared "
                                            f"slice of the host")
        if "configMap" in v:
            v["configMap"]["name"] = names.host_name(ns, v["configMap"].get("name", ""))
        if "secret" in v:
            v["secret"]["secretName"] = names.host_name(ns, v["secret"].get("secretName", ""))
        for s in (v.get("projected") or {}).get("sources") or []:
            if "configMap" in s:
                s["configMap"]["name"] = names.host_name(ns, s["configMap"].get("name", ""))
            if "secret" in s:
                s["secret"]["name"] = names.host_name(ns, s["secret"].get("name", ""))
            for item in (s.get("downwardAPI") or {}).get("items") or []:
                if "fieldRef" in item:
                    item["fieldRef"]["fieldPath"] = _field_path(item["fieldRef"]["fieldPath"])
        for item in (v.get("downwardAPI") or {}).get("items") or []:
            if "fieldRef" in item:
                item["fieldRef"]["fieldPath"] = _field_path(item["fieldRef"]["fieldPath"])
        volumes.append(v)
    spec["volumes"] = volumes
    literal = {"spec.nodeName": NODE_NAME, "spec.serviceAccountName": spec.get("serviceAccountName") or "default"}
    for c in _containers(spec):
        c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m.get("name") not in dropped]
        for e in c.get("env") or []:
            source = e.get("valueFrom") or {}
            if "fieldRef" in source:
                path = source["fieldRef"].get("fieldPath", "")
                if path in literal:
                    e.pop("valueFrom")
                    e["value"] = literal[path]
                else:
                    source["fieldRef"]["fieldPath"] = _field_path(path)
            if "configMapKeyRef" in source:
                source["configMapKeyRef"]["name"] = names.host_name(ns, source["configMapKeyRef"].get("name", ""))
            if "secretKeyRef" in source:
                source["secretKeyRef"]["name"] = names.host_name(ns, source["secretKeyRef"].get("name", ""))
        for e in c.get("envFrom") or []:
            for key in ("configMapRef", "secretRef"):
                if key in e:
                    e[key]["name"] = names.host_name(ns, e[key].get("name", ""))
    for s in spec.get("imagePullSecrets") or []:
        s["name"] = names.host_name(ns, s.get("name", ""))
    for key in STRIPPED:
        spec.pop(key, None)
    if placement is not None:  # the host's slice node pool, never the tenant's own placement
        placement.apply(spec)
    spec.update(automountServiceAccountToken=False, enableServiceLinks=False, hostname=name[:63].rstrip("-."))
    notes = {**names.identity(pod, "Pod"),
             names.TENANT_LABELS: orjson.dumps(meta.get("labels") or {}, option=orjson.OPT_SORT_KEYS).decode(),
             names.TENANT_ANNOTATIONS: orjson.dumps(meta.get("annotations") or {},
                                                    option=orjson.OPT_SORT_KEYS).decode()}
    notes[names.SPEC_HASH] = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": names.host_name(ns, name), "namespace": names.host_namespace(vc),
                         "labels": names.markers(vc), "annotations": notes},
            "spec": spec}


def host_copy(vc: Obj, obj: Obj, kind: str) -> Obj:
    """A tenant ConfigMap or Secret as the slice's pods mount it (a service-account token Secret
    becomes Opaque: the host's token controller must not touch it)."""
    meta = obj["metadata"]
    copied: Obj = {"apiVersion": "v1", "kind": kind,
                   "metadata": {"name": names.host_name(meta["namespace"], meta["name"]),
                                "namespace": names.host_namespace(vc), "labels": names.markers(vc),
                                "annotations": names.identity(obj, kind)}}
    for key in ("data", "binaryData", "stringData", "immutable"):
        if key in obj:
            copied[key] = obj[key]
    if kind == "Secret":
        kind_type = obj.get("type") or "Opaque"
        copied["type"] = "Opaque" if kind_type == "kubernetes.io/service-account-token" else kind_type
    return copied


def same_content(a: Obj, b: Obj) -> bool:
    return all(a.get(k) == b.get(k) for k in ("data", "binaryData", "type"))


# -- status, up ----------------------------------------------------------------------------------

def tenant_status(tenant: Obj, host: Obj) -> Obj:
    """The tenant pod's status from its host pod's: the host's is authoritative, except what the
    tenant owns (its qosClass, PodScheduled from its own scheduler, its readiness gates); the host's
    PodScheduled is reported as HostScheduled."""
    mine = tenant.get("status") or {}
    theirs = copy.deepcopy(host.get("status") or {})
    gates = {g.get("conditionType") for g in (tenant.get("spec") or {}).get("readinessGates") or []}
    owned = set(TENANT_OWNED_CONDITIONS) | gates | {names.HOST_SCHEDULED}
    conditions = [c for c in mine.get("conditions") or [] if c.get("type") in owned]
    host_scheduled = None
    for c in theirs.pop("conditions", None) or []:
        if c.get("type") == "PodScheduled":
            host_scheduled = {**c, "type": names.HOST_SCHEDULED}
        elif c.get("type") not in owned:
            conditions.append(c)
    if host_scheduled is not None:
        conditions = [c for c in conditions if c.get("type") != names.HOST_SCHEDULED] + [host_scheduled]
    status = {k: v for k, v in theirs.items() if k not in ("qosClass", "nominatedNodeName", "resize")}
    status["conditions"] = conditions
    if mine.get("qosClass"):
        status["qosClass"] = mine["qosClass"]
    return status


def started(tenant: Obj) -> bool:
    """Whether the tenant pod's host pod was ever placed (the marker survives restarts)."""
    return is_true((tenant.get("status") or {}).get("conditions"), names.HOST_SCHEDULED)


def with_condition(tenant: Obj, reason: str, message: str, now: str, status: str = "False") -> Obj | None:
    """The tenant pod's status with HostScheduled set so; None when it already says exactly that."""
    current = tenant.get("status") or {}
    old = find_condition(current.get("conditions"), names.HOST_SCHEDULED)
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return None
    condition = {"type": names.HOST_SCHEDULED, "status": status, "reason": reason, "message": message,
                 "lastProbeTime": None, "lastTransitionTime": now}
    rest = [c for c in current.get("conditions") or [] if c.get("type") != names.HOST_SCHEDULED]
    return {**current, "conditions": [*rest, condition]}


def lost(tenant: Obj, now: str) -> Obj:
    """The status of a started pod whose host pod vanished: Failed, as a kubelet's eviction leaves it."""
    current = tenant.get("status") or {}
    message = "the pod's host counterpart disappeared from the shared slice after it had started"
    conditions = [c for c in current.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady")]
    conditions += [{"type": t, "status": "False", "reason": "HostPodLost", "lastProbeTime": None,
                    "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
    return {**current, "phase": "Failed", "reason": "HostPodLost", "message": message, "conditions": conditions}
