"""The pure half of a slice: tenant pod → host pod, host pod status → tenant pod status, tenant Service
and EndpointSlice → host ones, and the host objects (namespace, quota, limits) and the tenant Node a slice
consists of. No I/O here."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from apiserver.apis.conditions import find_condition, is_true
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.jsonutil import Obj
from certs.tenant import SHARED_SERVICE_CIDR
from reconciler.shared import names
from reconciler.shared.names import NODE_NAME
from reconciler.shared.placement import Placement
from reconciler.shared.ranges import dns_address, first_address

PODS = "110"
EPHEMERAL_STORAGE = "100Gi"
# A container that states no requests still needs some for the host's quota: the least, so that it runs as on a
# node of its own (a 1m cpu request gives the kernel's minimum cpu weight, as none does) and counts as next to
# nothing, as the tenant's scheduler counts it.
DEFAULT_REQUEST = {"cpu": "1m", "memory": "1Mi"}
# Scheduling and identity fields that could reach other tenants' or the host's machinery.
STRIPPED = ("nodeName", "nodeSelector", "affinity", "topologySpreadConstraints", "tolerations", "priorityClassName",
            "priority", "preemptionPolicy", "schedulerName", "runtimeClassName", "serviceAccountName",
            "serviceAccount", "subdomain", "overhead", "schedulingGates", "resourceClaims")
REFUSED_VOLUMES = ("hostPath", "csi", "iscsi", "nfs", "rbd", "cephfs", "glusterfs", "fc", "flexVolume", "local")
CLAIM_VOLUMES = ("persistentVolumeClaim", "ephemeral")  # served by host claims, where storage is offered
PROVISIONER = f"{names.MANAGER}.{names.DOMAIN}"  # the tenant's StorageClasses' provisioner: the slice's syncer
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
TENANT_OWNED_CONDITIONS = ("PodScheduled",)
HOST_RESOURCES = ("cpu", "memory", "ephemeral-storage")  # and hugepages-*: what a host pod may ask of the host
# the tenant's own word on a pod that the host does not repeat: its eviction or preemption sets it there
TENANT_KEPT_CONDITIONS = ("DisruptionTarget",)
CLUSTER_DOMAIN = "cluster.local"
TOKEN_EXPIRY = 3607  # seconds: what the tenant's admission asks for kube-api-access volumes, as a kubelet gets it
ENDPOINTSLICE_MANAGER = f"{names.MANAGER}.{names.DOMAIN}"


@dataclass(frozen=True)
class TenantNetwork:
    """What a slice's pods are given of their tenant's network. ``routed``: the tenant has a Services range of
    its own, which the host's proxies carry (:mod:`reconciler.shared.ranges`); a tenant made before, or
    without a slice, shares the range promoted nodes expect, which the host cannot carry."""

    service_cidr: str = SHARED_SERVICE_CIDR

    @property
    def routed(self) -> bool:
        return self.service_cidr != SHARED_SERVICE_CIDR

    @property
    def kubernetes_ip(self) -> str:
        return first_address(self.service_cidr)

    @property
    def dns_ip(self) -> str:
        return dns_address(self.service_cidr)


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
                previous: Obj | None = None, kubelet: tuple[str, int] | None = None) -> Obj:
    """Capacity and allocatable are the slice, exactly; Ready says whether the host can run its pods; the
    tenant apiserver reaches the node's kubelet API at ``kubelet`` (:mod:`reconciler.shared.kubeletapi`)."""
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
            "addresses": [*([{"type": "InternalIP", "address": kubelet[0]}] if kubelet else []),
                          {"type": "Hostname", "address": NODE_NAME}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet[1] if kubelet else 0}},
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
    """A projected volume with a service-account token of the tenant (kube-api-access-*, or one a workload
    declares with its own audience and expiry)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in s for s in sources)


@dataclass(frozen=True)
class TokenAsk:
    """One service-account token a pod's volumes project: its key in the host Secret that carries it."""

    key: str
    audience: str
    expiration: int


def token_asks(pod: Obj) -> list[TokenAsk]:
    """The tokens the pod's projected volumes ask for, in order."""
    asks = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        for i, s in enumerate((v.get("projected") or {}).get("sources") or []):
            token = s.get("serviceAccountToken")
            if token is not None:
                asks.append(TokenAsk(f"{v['name']}.{i}", token.get("audience") or "",
                                     int(token.get("expirationSeconds") or TOKEN_EXPIRY)))
    return asks


def token_secret_name(pod: Obj) -> str:
    """The host Secret that carries a tenant pod's service-account tokens."""
    meta = pod["metadata"]
    return names.host_name(meta["namespace"], f"{meta['name']}.token")


def token_secret(vc: Obj, pod: Obj, tokens: dict[str, str], refresh_at: str) -> Obj:
    """The tokens the tenant issued for ``pod``, bound to it, as its host pod mounts them; ``refresh_at`` is
    when the first of them reaches 80% of its life (a kubelet's rule)."""
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": token_secret_name(pod), "namespace": names.host_namespace(vc),
                         "labels": {**names.markers(vc), names.TOKEN_OF: meta["uid"]},
                         "annotations": {**names.identity({"metadata": {**meta, "name": f"{meta['name']}.token"}},
                                                          "ServiceAccountToken"),
                                         names.REFRESH_AT: refresh_at}},
            "stringData": tokens}


def tokens_current(secret: Obj, pod: Obj) -> bool:
    """Whether a host token Secret carries this pod's tokens: bound to this tenant pod (a StatefulSet's pod made
    again has its name, not its uid) and one for each source its volumes project now."""
    bound = (secret["metadata"].get("labels") or {}).get(names.TOKEN_OF) == pod["metadata"].get("uid")
    held = set(secret.get("data") or {}) | set(secret.get("stringData") or {})
    return bound and all(ask.key in held for ask in token_asks(pod))


def _service_env(name: str, ip: str, ports: list[Obj]) -> list[Obj]:
    """What a kubelet tells containers of a Service (``enableServiceLinks``, and always of ``kubernetes``)."""
    prefix = name.upper().replace("-", "_")
    env = [{"name": f"{prefix}_SERVICE_HOST", "value": ip}]
    if not ports:
        return env
    first = ports[0]
    env.append({"name": f"{prefix}_SERVICE_PORT", "value": str(first["port"])})
    for p in ports:
        if p.get("name"):
            env.append({"name": f"{prefix}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}", "value": str(p["port"])})
    proto = (first.get("protocol") or "TCP").lower()
    env.append({"name": f"{prefix}_PORT", "value": f"{proto}://{ip}:{first['port']}"})
    for p in ports:
        protocol = p.get("protocol") or "TCP"
        key = f"{prefix}_PORT_{p['port']}_{protocol.upper()}"
        env += [{"name": key, "value": f"{protocol.lower()}://{ip}:{p['port']}"},
                {"name": f"{key}_PROTO", "value": protocol.lower()},
                {"name": f"{key}_PORT", "value": str(p["port"])},
                {"name": f"{key}_ADDR", "value": ip}]
    return env


def service_env(pod: Obj, network: TenantNetwork, services: list[Obj]) -> list[Obj]:
    """The tenant's Service environment of a pod, as its kubelet would write it: ``kubernetes`` always, the
    pod's namespace's Services with a ClusterIP unless ``enableServiceLinks`` is false."""
    ns = pod["metadata"]["namespace"]
    env = _service_env("kubernetes", network.kubernetes_ip,
                       [{"name": "https", "port": 443, "protocol": "TCP"}])
    if (pod.get("spec") or {}).get("enableServiceLinks") is False:
        return env
    for svc in sorted(services, key=lambda s: s["metadata"]["name"]):
        meta, spec = svc["metadata"], svc.get("spec") or {}
        ip = spec.get("clusterIP")
        if meta.get("namespace") != ns or not ip or ip == "None" or (ns, meta["name"]) == ("default", "kubernetes"):
            continue
        env += _service_env(meta["name"], ip, spec.get("ports") or [])
    return env


def dns_config(pod: Obj, network: TenantNetwork) -> tuple[str, Obj | None]:
    """The host pod's DNS: ``ClusterFirst`` is the tenant's kube-dns with the tenant's search list, merged with
    the pod's own ``dnsConfig`` (a host kubelet would give it the host's); ``Default`` and ``None`` pass."""
    spec = pod.get("spec") or {}
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    own = spec.get("dnsConfig")
    if policy not in ("ClusterFirst", "ClusterFirstWithHostNet"):
        return policy, own
    own = own or {}
    ns, domain = pod["metadata"]["namespace"], CLUSTER_DOMAIN
    searches = list(dict.fromkeys([f"{ns}.svc.{domain}", f"svc.{domain}", domain, *(own.get("searches") or [])]))
    options = {"ndots": {"name": "ndots", "value": "5"}}
    for o in own.get("options") or []:
        options[o.get("name", "")] = o
    nameservers = list(dict.fromkeys([network.dns_ip, *(own.get("nameservers") or [])]))[:3]
    return "None", {"nameservers": nameservers, "searches": searches, "options": list(options.values())}


def references(pod: Obj, network: TenantNetwork | None = None) -> References:
    """What the pod's host pod needs copied (a token volume's CA only where the token is served)."""
    refs = References()
    spec = pod.get("spec") or {}
    routed = (network or TenantNetwork()).routed
    for v in spec.get("volumes") or []:
        if _is_token_volume(v) and not routed:
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


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def _field_path(path: str) -> str:
    """A downward-API path of the tenant pod, read from the host pod's annotations."""
    if path in _DOWNWARD:
        return f"metadata.annotations['{_DOWNWARD[path]}']"
    match = _SUBSCRIPT.match(path)
    if match:
        return f"metadata.annotations['{_downward_key(match.group(1), match.group(2))}']"
    return path


def _downward_key(kind: str, key: str) -> str:
    """The host pod's annotation that carries one tenant label or annotation the pod's downward API names
    (an annotation of its own: a tenant key may have a prefix, which an annotation's name cannot hold)."""
    return f"{kind[0]}.{names.DOMAIN}/{hashlib.sha256(key.encode()).hexdigest()[:40]}"


def _subscripts(pod: Obj) -> set[tuple[str, str]]:
    """The (labels|annotations, key) the pod's env and downward-API volumes name one by one."""
    spec = pod.get("spec") or {}
    paths = [(e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath", "")
             for c in _containers(spec) for e in c.get("env") or []]
    for v in spec.get("volumes") or []:
        sources = [v.get("downwardAPI") or {}, *((s.get("downwardAPI") or {})
                                                for s in (v.get("projected") or {}).get("sources") or [])]
        paths += [(i.get("fieldRef") or {}).get("fieldPath", "") for s in sources for i in s.get("items") or []]
    return {(m.group(1), m.group(2)) for m in map(_SUBSCRIPT.match, paths) if m}


def claim_names(pod: Obj) -> list[str]:
    """The tenant claims a pod's volumes use: its own, and those its generic ephemeral volumes make
    (``<pod>-<volume>``, as the tenant's ephemeral volume controller names them)."""
    name = pod["metadata"]["name"]
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if "persistentVolumeClaim" in v:
            out.append(v["persistentVolumeClaim"].get("claimName", ""))
        elif "ephemeral" in v:
            out.append(f"{name}-{v['name']}")
    return out


def generation(pod: Obj) -> str:
    """The tenant pod's generation, as the host pod's :data:`~reconciler.shared.names.GENERATION` says it."""
    return str(pod["metadata"].get("generation") or 1)


def downward_metadata(pod: Obj) -> dict[str, str | None]:
    """The tenant pod's labels and annotations, as the host pod's annotations its downward API reads
    (kept current: a kubelet shows a pod's new labels and annotations to its running containers, and
    reads them again for a container it starts again). A single key the pod names and does not have
    is None: not on the host pod, so it reads as empty there too."""
    meta = pod["metadata"]
    notes: dict[str, str | None] = {names.TENANT_LABELS: format_map(meta.get("labels") or {}),
                                    names.TENANT_ANNOTATIONS: format_map(meta.get("annotations") or {})}
    for kind, key in _subscripts(pod):
        notes[_downward_key(kind, key)] = (meta.get(kind) or {}).get(key)
    return notes


def format_map(values: dict[str, str]) -> str:
    """A map as a kubelet writes it into a downward-API file: ``key="value"`` lines in key order, the
    value quoted (the host's kubelet shows this one annotation as it is)."""
    return "\n".join(f"{k}={orjson.dumps(values[k]).decode()}" for k in sorted(values))


def _env_literal(pod: Obj, path: str) -> str | None:
    """What a kubelet resolves an env ``fieldRef`` of the tenant pod to, where the host pod has no field that
    says it: its node, its ServiceAccount. None for what the host pod's fields (or annotations) answer."""
    if path == "spec.nodeName":
        return NODE_NAME
    if path == "spec.serviceAccountName":
        return (pod.get("spec") or {}).get("serviceAccountName") or "default"
    return None


def _only(resources: Obj, keeps: Callable[[str, str], bool]) -> Obj:
    """Resource requirements with the (section, resource) that ``keeps`` accepts; a section left empty goes."""
    out = {k: v for k, v in resources.items() if k not in ("requests", "limits")}
    for section in ("requests", "limits"):
        kept = {r: q for r, q in (resources.get(section) or {}).items() if keeps(section, r)}
        if kept:
            out[section] = kept
    return out


def _host_resources(resources: Obj) -> Obj:
    """A container's resources as the host is asked for them: what a slice promises (cpu, memory, local
    storage, huge pages). Any other, such as an extended resource added to the virtual node's status, is the
    tenant's own accounting, which the host's nodes do not have."""
    return _only(resources, lambda _, r: r in HOST_RESOURCES or r.startswith("hugepages-"))


def _host_container(c: Obj, pod: Obj, links: list[Obj], dropped: set[str]) -> None:
    """One container of the tenant pod as its host pod runs it (in place): the tenant's Service environment
    first, its downward API and references pointing at the host pod's copies, no mount of a dropped volume,
    the resources the host has."""
    ns = pod["metadata"]["namespace"]
    if c.get("resources"):
        c["resources"] = _host_resources(c["resources"])
    if "volumeMounts" in c or dropped:
        c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m.get("name") not in dropped]
    if links:  # before the container's own: a name it declares wins, as over a kubelet's
        c["env"] = [*copy.deepcopy(links), *(c.get("env") or [])]
    for e in c.get("env") or []:
        source = e.get("valueFrom") or {}
        if "fieldRef" in source:
            path = source["fieldRef"].get("fieldPath", "")
            value = _env_literal(pod, path)
            if value is not None:
                e.pop("valueFrom")
                e["value"] = value
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


def host_pod(vc: Obj, pod: Obj, placement: Placement | None = None, network: TenantNetwork | None = None,
             services: list[Obj] | None = None, storage: bool = False) -> Obj:
    """The host's pod for a tenant pod bound to the slice's node (:class:`Refused` when it cannot run
    there). Tenant labels and annotations stay out of the host's metadata, where they could steer host
    Services or policies; they travel as annotations for the downward API. With a routed ``network`` the
    pod gets what its kubelet would give it of the tenant: its tokens (from :func:`token_secret`), its DNS,
    and the environment of its ``services``."""
    meta = pod["metadata"]
    ns, name = meta["namespace"], meta["name"]
    network = network or TenantNetwork()
    spec = copy.deepcopy(pod.get("spec") or {})
    volumes = []
    dropped = set()
    for v in spec.get("volumes") or []:
        if _is_token_volume(v) and not network.routed:  # no tenant API to reach: the token would be useless
            dropped.add(v["name"])
            continue
        refused = next((k for k in REFUSED_VOLUMES if k in v), None)
        if refused:
            raise Refused("ProviderFailed", f"volume {v.get('name')!r}: {refused} volumes cannot run in a shared "
                                            f"slice of the host")
        claim = next((k for k in CLAIM_VOLUMES if k in v), None)
        if claim and not storage:
            raise Refused("ProviderFailed", f"volume {v.get('name')!r}: the host offers no storage to shared slices "
                                            f"(vc-apiserver's --slice-storage-classes)")
        if claim == "ephemeral":  # the tenant made its claim: the host pod uses that claim's host claim
            v.pop("ephemeral")
            v["persistentVolumeClaim"] = {"claimName": f"{name}-{v['name']}"}
        if claim:
            v["persistentVolumeClaim"]["claimName"] = names.host_name(ns, v["persistentVolumeClaim"]["claimName"])
        if "configMap" in v:
            v["configMap"]["name"] = names.host_name(ns, v["configMap"].get("name", ""))
        if "secret" in v:
            v["secret"]["secretName"] = names.host_name(ns, v["secret"].get("secretName", ""))
        for i, s in enumerate((v.get("projected") or {}).get("sources") or []):
            if "serviceAccountToken" in s:
                token = s.pop("serviceAccountToken")
                s["secret"] = {"name": token_secret_name(pod), "items": [{"key": f"{v['name']}.{i}",
                                                                          "path": token.get("path", "token")}]}
                continue
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
    links = service_env(pod, network, services or []) if network.routed else []
    for c in _containers(spec):
        _host_container(c, pod, links, dropped)
    for s in spec.get("imagePullSecrets") or []:
        s["name"] = names.host_name(ns, s.get("name", ""))
    for key in STRIPPED:
        spec.pop(key, None)
    spec.pop("ephemeralContainers", None)  # a pod is made without: they follow through their subresource
    if placement is not None:  # the host's slice node pool, never the tenant's own placement
        placement.apply(spec)
    if network.routed:
        spec["dnsPolicy"], dns = dns_config(pod, network)
        spec.pop("dnsConfig", None)
        if dns is not None:
            spec["dnsConfig"] = dns
    spec.update(automountServiceAccountToken=False, enableServiceLinks=False,
                hostname=spec.get("hostname") or name[:63].rstrip("-."))
    notes = {**names.identity(pod, "Pod"), **{k: v for k, v in downward_metadata(pod).items() if v is not None},
             names.GENERATION: generation(pod)}
    notes[names.SPEC_HASH] = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": names.host_name(ns, name), "namespace": names.host_namespace(vc),
                         "labels": names.markers(vc), "annotations": notes},
            "spec": spec}


@dataclass
class SpecChanges:
    """What a running tenant pod changed of what a pod may change, for its host pod to follow: container
    images and ``activeDeadlineSeconds`` (a patch of the pod), container resources (its ``resize``
    subresource), and new ephemeral containers (its ``ephemeralcontainers`` subresource)."""

    spec: Obj = field(default_factory=dict)
    resize: Obj = field(default_factory=dict)
    ephemeral: list[Obj] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.spec or self.resize or self.ephemeral)


def _resources_differ(tenant: Obj, host: Obj) -> bool:
    """Whether the host container lacks what the tenant's states (the host's defaults for what it does not
    state are left alone; both servers write quantities in the same canonical form)."""
    return any((host.get(section) or {}).get(r) != q
               for section in ("requests", "limits") for r, q in (tenant.get(section) or {}).items())


def spec_changes(pod: Obj, host: Obj, network: TenantNetwork | None = None,
                 services: list[Obj] | None = None) -> SpecChanges:
    """What ``host`` must still take of the tenant ``pod``'s spec (empty once it has all of it)."""
    mine, theirs = pod.get("spec") or {}, host.get("spec") or {}
    changes = SpecChanges()
    for kind in ("initContainers", "containers"):
        have = {c.get("name"): c for c in theirs.get(kind) or []}
        ours = [c for c in mine.get(kind) or [] if c.get("name") in have]
        images = [{"name": c["name"], "image": c.get("image")} for c in ours
                  if c.get("image") != have[c["name"]].get("image")]
        asked = {c["name"]: _host_resources(c.get("resources") or {}) for c in ours}
        resized = [{"name": name, "resources": wanted} for name, wanted in asked.items()
                   if _resources_differ(wanted, have[name].get("resources") or {})]
        if images:
            changes.spec[kind] = images
        if resized:
            changes.resize[kind] = resized
    deadline = mine.get("activeDeadlineSeconds")
    if deadline is not None and deadline != theirs.get("activeDeadlineSeconds"):
        changes.spec["activeDeadlineSeconds"] = deadline
    running = {c.get("name") for c in theirs.get("ephemeralContainers") or []}
    new = [copy.deepcopy(c) for c in mine.get("ephemeralContainers") or [] if c.get("name") not in running]
    if new:
        network = network or TenantNetwork()
        dropped = ({v["name"] for v in mine.get("volumes") or []} - {v["name"] for v in theirs.get("volumes") or []})
        links = service_env(pod, network, services or []) if network.routed else []
        for c in new:
            _host_container(c, pod, links, dropped)
        changes.ephemeral = new
    return changes


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

def _tenant_resources(status: Obj, container: Obj) -> Obj:
    """A container status's resources as the tenant's kubelet would report them: only the resources the
    tenant's container states (the host's defaults for the rest, its LimitRange's requests, are the host's)."""
    wanted = container.get("resources") or {}

    def stated(section: str, resource: str) -> bool:
        return resource in (wanted.get(section) or {})
    out = {k: v for k, v in status.items() if k != "allocatedResources"}
    allocated = _only({"requests": status.get("allocatedResources") or {}}, stated).get("requests")
    if allocated:
        out["allocatedResources"] = allocated
    if "resources" in status:
        out["resources"] = _only(status["resources"], stated)
    return out


def _host_observed(host: Obj) -> bool:
    """Whether the host's kubelet has acted on the host pod's latest spec (one that does not say has)."""
    observed = (host.get("status") or {}).get("observedGeneration")
    return observed is None or observed >= ((host.get("metadata") or {}).get("generation") or 0)


def tenant_status(tenant: Obj, host: Obj, caught_up: bool = True) -> Obj:
    """The tenant pod's status from its host pod's: the host's is authoritative, except what the
    tenant owns (its qosClass, PodScheduled from its own scheduler, its readiness gates, a disruption it
    started); the host's PodScheduled is reported as HostScheduled. Generations are the tenant's: its
    ``observedGeneration`` is its own once the host pod has every change (``caught_up``, see
    :func:`spec_changes` and :data:`~reconciler.shared.names.GENERATION`) and the host's kubelet has acted on it."""
    mine = tenant.get("status") or {}
    theirs = copy.deepcopy(host.get("status") or {})
    gates = {g.get("conditionType") for g in (tenant.get("spec") or {}).get("readinessGates") or []}
    owned = set(TENANT_OWNED_CONDITIONS) | gates | {names.HOST_SCHEDULED}
    host_conditions = theirs.pop("conditions", None) or []
    told = {c.get("type") for c in host_conditions}
    conditions = [c for c in mine.get("conditions") or []
                  if c.get("type") in owned or (c.get("type") in TENANT_KEPT_CONDITIONS and c.get("type") not in told)]
    observed = (tenant["metadata"].get("generation") if caught_up and _host_observed(host)
                else mine.get("observedGeneration"))
    host_scheduled = None
    for c in host_conditions:
        c.pop("observedGeneration", None)  # the host's generations mean nothing in the tenant
        if observed is not None:
            c["observedGeneration"] = observed
        if c.get("type") == "PodScheduled":
            host_scheduled = {**c, "type": names.HOST_SCHEDULED}
        elif c.get("type") not in owned:
            conditions.append(c)
    if host_scheduled is not None:
        conditions = [c for c in conditions if c.get("type") != names.HOST_SCHEDULED] + [host_scheduled]
    status = {k: v for k, v in theirs.items() if k not in ("qosClass", "nominatedNodeName", "resize",
                                                             "observedGeneration")}
    spec = tenant.get("spec") or {}
    for key, kind in (("containerStatuses", "containers"), ("initContainerStatuses", "initContainers")):
        containers = {c.get("name"): c for c in spec.get(kind) or []}
        if key in status:
            status[key] = [_tenant_resources(s, containers.get(s.get("name"), {})) for s in status[key]]
    if observed is not None:
        status["observedGeneration"] = observed
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


# -- Services, down ------------------------------------------------------------------------------

def host_service(vc: Obj, svc: Obj) -> Obj | None:
    """The host's Service for a tenant Service: the tenant's ClusterIP (from the tenant's own range, which the
    host serves), its ports, no selector (the endpoints are mirrored: :func:`host_endpointslice`). A NodePort
    (or LoadBalancer, which has no provider here) keeps its node ports, which the host's proxies open on
    every node. None for what needs no host Service: headless and ExternalName ones."""
    meta, spec = svc["metadata"], svc.get("spec") or {}
    ip = spec.get("clusterIP")
    kind = spec.get("type") or "ClusterIP"
    if kind == "ExternalName" or not ip or ip == "None":
        return None
    node_ports = kind in ("NodePort", "LoadBalancer")
    ports = [{k: p[k] for k in ("name", "port", "protocol", "nodePort") if k in p and (node_ports or k != "nodePort")}
             for p in spec.get("ports") or []]
    host_spec: Obj = {"type": "NodePort" if node_ports else "ClusterIP", "clusterIP": ip,
                      "clusterIPs": list(spec.get("clusterIPs") or [ip]), "ports": ports,
                      "sessionAffinity": spec.get("sessionAffinity") or "None"}
    if spec.get("sessionAffinityConfig"):
        host_spec["sessionAffinityConfig"] = spec["sessionAffinityConfig"]
    if node_ports:
        host_spec["externalTrafficPolicy"] = "Cluster"  # a tenant's Local names nodes the host does not have
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": names.host_name(meta["namespace"], meta["name"]), "namespace": names.host_namespace(vc),
                         "labels": names.markers(vc), "annotations": names.identity(svc, "Service")},
            "spec": host_spec}


def service_differs(have: Obj, want: Obj) -> str:
    """'' when the host Service is as wanted; 'replace' when only a new one can be (its ClusterIP or type
    changed, which the host does not update); 'update' otherwise."""
    a, b = have.get("spec") or {}, want["spec"]
    if a.get("clusterIP") != b["clusterIP"] or a.get("type") != b["type"]:
        return "replace"
    ports = [{k: p.get(k) for k in ("name", "port", "protocol", "nodePort") if k in q}
             for p, q in zip(a.get("ports") or [], b["ports"], strict=False)]
    same = (ports == b["ports"] and len(a.get("ports") or []) == len(b["ports"])
            and a.get("sessionAffinity") == b["sessionAffinity"]
            and a.get("sessionAffinityConfig") == b.get("sessionAffinityConfig"))
    return "" if same else "update"


def host_endpointslice(vc: Obj, es: Obj, service: str) -> Obj:
    """A tenant EndpointSlice of a Service the host carries, for the host Service named ``service``: the
    same addresses (a slice pod's IP is its host pod's), ports and conditions; what names tenant objects
    (nodes, pods, zones) stays behind."""
    meta = es["metadata"]
    endpoints = []
    for e in es.get("endpoints") or []:
        endpoint = {"addresses": list(e.get("addresses") or []), "conditions": dict(e.get("conditions") or {})}
        if e.get("hostname"):
            endpoint["hostname"] = e["hostname"]
        endpoints.append(endpoint)
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": names.host_name(meta["namespace"], meta["name"]),
                         "namespace": names.host_namespace(vc),
                         "labels": {**names.markers(vc), "kubernetes.io/service-name": service,
                                    "endpointslice.kubernetes.io/managed-by": ENDPOINTSLICE_MANAGER},
                         "annotations": names.identity(es, "EndpointSlice")},
            "addressType": es.get("addressType") or "IPv4", "endpoints": endpoints,
            "ports": [dict(p) for p in es.get("ports") or []]}


def endpointslice_differs(have: Obj, want: Obj) -> bool:
    return any(have.get(k) != want.get(k) for k in ("endpoints", "ports", "addressType")) or \
        (have["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != \
        want["metadata"]["labels"]["kubernetes.io/service-name"]


def apiserver_endpointslice(addresses: list[tuple[str, int]]) -> Obj:
    """The tenant's ``kubernetes`` EndpointSlice as a slice's pods need it: the apiserver where they reach it
    directly (the tenant's own lists where nodes reach it, often a NodePort, which a proxy cannot chain to)."""
    ports = sorted({port for _, port in addresses})
    return {"metadata": {"namespace": "default", "name": "kubernetes", "uid": "",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip, _ in addresses],
            "ports": [{"name": "https", "port": ports[0], "protocol": "TCP"}]}


# -- volumes, down and up ------------------------------------------------------------------------

def tenant_storage_class(host_class: Obj, default: bool) -> Obj:
    """A host StorageClass the slice offers, as its tenant sees it: the same name and reclaim policy, the
    slice's syncer as its provisioner, bound at once (the host claim binds where the host pod lands)."""
    annotations = {DEFAULT_CLASS: "true"} if default else {}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": host_class["metadata"]["name"], "labels": {names.MANAGED_BY: names.MANAGER},
                         "annotations": annotations},
            "provisioner": PROVISIONER, "reclaimPolicy": host_class.get("reclaimPolicy") or "Delete",
            "volumeBindingMode": "Immediate", "allowVolumeExpansion": False}


def storage_class_differs(have: Obj, want: Obj) -> bool:
    return (have.get("provisioner"), have.get("reclaimPolicy"), (have["metadata"].get("annotations") or {}).get(
        DEFAULT_CLASS)) != (want["provisioner"], want["reclaimPolicy"], want["metadata"]["annotations"].get(DEFAULT_CLASS))


def host_claim(vc: Obj, claim: Obj) -> Obj:
    """A tenant PersistentVolumeClaim of one of the offered classes, as the host claim that holds its data."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    host_spec = {"accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                 "resources": {"requests": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get(
                     "storage", "1Gi")}},
                 "storageClassName": spec.get("storageClassName"), "volumeMode": spec.get("volumeMode") or "Filesystem"}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.host_name(meta["namespace"], meta["name"]), "namespace": names.host_namespace(vc),
                         "labels": names.markers(vc), "annotations": names.identity(claim, "PersistentVolumeClaim")},
            "spec": host_spec}


def tenant_volume(vc: Obj, claim: Obj) -> Obj:
    """The tenant's PersistentVolume for a claim the slice serves, bound to it: what the claim asked for, and
    where its data is (the host claim, as the volume's handle)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"pvc-{meta['uid']}", "labels": {names.MANAGED_BY: names.MANAGER},
                         "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
            "spec": {"capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
                     "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": spec.get("storageClassName"),
                     "volumeMode": spec.get("volumeMode") or "Filesystem",
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                                  "name": meta["name"], "uid": meta["uid"]},
                     "csi": {"driver": PROVISIONER, "volumeHandle": f"{names.host_namespace(vc)}/"
                                                                    f"{names.host_name(meta['namespace'], meta['name'])}"}}}
