"""Tenant add-ons: what a tenant cluster needs once it has a node, as kubeadm (and kubenest) install them.

- kube-proxy, a DaemonSet on every tenant node (host network, privileged: it programs the node's
  iptables), talking to the tenant apiserver at the endpoint nodes use, with its ServiceAccount's
  token, bound to ``system:node-proxier``.
- CoreDNS, a Deployment behind the ``kube-dns`` Service at the tenth address of the service range
  (the kubelet's ``clusterDNS``), reading Services and EndpointSlices with kubeadm's ``system:coredns``
  role.
- The ``kubernetes`` Service's endpoints: the tenant apiserver runs with no endpoint reconciler (its
  own address is not where nodes reach it: a NodePort, a bridge address, a load balancer), so the
  address users and nodes get is written here, as an EndpointSlice and the Endpoints beside it, with
  ``skip-mirror`` as the apiserver's own reconciler writes them.

Everything is server-side applied with the reconciler's field manager, so a pass that changes
nothing writes nothing; :func:`manifests` is pure, :func:`ensure` does the I/O, and
:class:`AddonInstaller` skips what was applied already.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
from urllib.parse import urlsplit

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.jsonutil import Obj
from reconciler import versions
from reconciler.runtime.base import FIELD_MANAGER
from reconciler.shared.names import SHARED_NODE
from reconciler.shared.ranges import dns_address

log = logging.getLogger(__name__)

NAMESPACE = "kube-system"
KUBE_PROXY_IMAGE = f"registry.k8s.io/kube-proxy:{versions.KUBERNETES_VERSION}"
COREDNS_IMAGE = f"registry.k8s.io/coredns/coredns:{versions.COREDNS_VERSION}"
ADDON_LABEL = "kosmos.io/addon"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

COREFILE = """.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""




def _meta(name: str, addon: str, namespace: str | None = NAMESPACE, **labels: str) -> Obj:
    meta: Obj = {"name": name, "labels": {ADDON_LABEL: addon, **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


CONFIG_DIGEST = "kosmos.io/config-digest"


def kube_proxy(endpoint: str, cluster_cidr: str | None = None) -> list[Obj]:
    """kube-proxy on every node, reaching its apiserver at ``endpoint``. With ``cluster_cidr`` (the pods'
    range), traffic to a Service from outside it is masqueraded, so replies come back the same way."""
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default", "cluster": {"server": endpoint, "certificate-authority": f"{SA_DIR}/ca.crt"}}],
        "users": [{"name": "default", "user": {"tokenFile": f"{SA_DIR}/token"}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "current-context": "default",
    }
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration", "mode": "iptables",
        "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
        # a node may share its kernel's conntrack table with others (a VM's namespaces): leave its limits alone
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "bindAddress": "0.0.0.0", "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "0.0.0.0:10256",
    }
    if cluster_cidr:
        config["clusterCIDR"] = cluster_cidr
    labels = {"k8s-app": "kube-proxy"}
    container = {
        "name": "kube-proxy", "image": KUBE_PROXY_IMAGE,
        "command": ["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf",
                    "--hostname-override=$(NODE_NAME)"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"},
                         {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                         {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("kube-proxy", "kube-proxy")},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta("kubeadm:node-proxier", "kube-proxy", None),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-proxier"},
         "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("kube-proxy", "kube-proxy", **labels),
         "data": {"config.conf": json.dumps(config, indent=2), "kubeconfig.conf": json.dumps(kubeconfig, indent=2)}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta("kube-proxy", "kube-proxy", **labels),
         "spec": {"selector": {"matchLabels": labels},
                  "updateStrategy": {"type": "RollingUpdate"},
                  # kube-proxy reads its configuration once: a changed one rolls the pods
                  "template": {"metadata": {"labels": labels,
                                            "annotations": {CONFIG_DIGEST: digest([config])[:16]}}, "spec": {
                      "serviceAccountName": "kube-proxy", "hostNetwork": True,
                      "priorityClassName": "system-node-critical",
                      "nodeSelector": {"kubernetes.io/os": "linux"},
                      "tolerations": [{"operator": "Exists"}],
                      "containers": [container],
                      "volumes": [{"name": "kube-proxy", "configMap": {"name": "kube-proxy"}},
                                  {"name": "xtables-lock",
                                   "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                                  {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}}]}}}},
    ]


def coredns(service_cidr: str, replicas: int = 2) -> list[Obj]:
    labels = {"k8s-app": "kube-dns"}
    container = {
        "name": "coredns", "image": COREDNS_IMAGE, "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                  {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "initialDelaySeconds": 60,
                          "timeoutSeconds": 5, "failureThreshold": 5},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("coredns", "coredns")},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta("system:coredns", "coredns", None),
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta("system:coredns", "coredns", None),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("coredns", "coredns"),
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("coredns", "coredns", **labels),
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": "coredns", "dnsPolicy": "Default",
                      "priorityClassName": "system-cluster-critical",
                      "nodeSelector": {"kubernetes.io/os": "linux"},
                      "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                      {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
                      "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                          "weight": 100, "podAffinityTerm": {
                              "labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}}]}},
                      "containers": [container],
                      "volumes": [{"name": "config-volume", "configMap": {
                          "name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": _meta("kube-dns", "coredns", **labels, **{"kubernetes.io/name": "CoreDNS"}),
         "spec": {"clusterIP": dns_address(service_cidr), "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                            {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}},
    ]


def kubernetes_endpoints(endpoint: str) -> list[Obj]:
    """The ``kubernetes`` Service's endpoints at ``endpoint`` (an IP address and port); none for a host
    name or a loopback address, which no pod could use."""
    url = urlsplit(endpoint)
    try:
        address = ipaddress.ip_address(url.hostname or "")
    except ValueError:
        return []
    if address.is_loopback or url.port is None:
        return []
    labels = {"kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER}
    family = "IPv6" if address.version == 6 else "IPv4"
    return [
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
         "addressType": family, "endpoints": [{"addresses": [str(address)], "conditions": {"ready": True}}],
         "ports": [{"name": "https", "port": url.port, "protocol": "TCP"}]},
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": "kubernetes", "namespace": "default",
                      "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
         "subsets": [{"addresses": [{"ip": str(address)}], "ports": [{"name": "https", "port": url.port,
                                                                      "protocol": "TCP"}]}]},
    ]


# A shared slice's node is no machine: node agents (kube-proxy) stay off it. CoreDNS runs there like any
# tenant workload (the host's proxies carry a slice's Services, kube-dns among them).
NOT_ON_A_SHARED_SLICE = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": SHARED_NODE, "operator": "DoesNotExist"}]}]}}


def manifests(endpoint: str, service_cidr: str) -> list[Obj]:
    """Every add-on object of a tenant whose apiserver nodes reach at ``endpoint``."""
    return [*kubernetes_endpoints(endpoint), *only_on(kube_proxy(endpoint), NOT_ON_A_SHARED_SLICE),
            *coredns(service_cidr)]


def only_on(objs: list[Obj], node_affinity: Obj) -> list[Obj]:
    """The same objects, their pods kept to the nodes ``node_affinity`` (a NodeAffinity) allows."""
    out = json.loads(json.dumps(objs))
    for obj in out:
        if obj["kind"] in ("DaemonSet", "Deployment"):
            obj["spec"]["template"]["spec"].setdefault("affinity", {})["nodeAffinity"] = node_affinity
    return out


def digest(objs: list[Obj]) -> str:
    return hashlib.sha256(json.dumps(objs, sort_keys=True).encode()).hexdigest()


async def ensure(tenant: KubeClient, objs: list[Obj]) -> None:
    """Server-side apply each object (forced: these objects are the reconciler's)."""
    for obj in objs:
        await tenant.apply(obj, FIELD_MANAGER)


class AddonInstaller:
    """Applies each tenant's add-ons once it has a node, and again only when they change (or after a
    restart): the digest of what was last applied is kept per tenant (by uid)."""

    def __init__(self) -> None:
        self._applied: dict[str, str] = {}

    def forget(self, uid: str) -> None:
        self._applied.pop(uid, None)

    async def ensure(self, vc: VirtualCluster, tenant: KubeClient, endpoint: str, service_cidr: str) -> None:
        """A tenant that refuses them is retried on the next pass: its nodes and control plane are fine
        meanwhile. ``service_cidr`` is the tenant's Services range (kube-dns is at its tenth address)."""
        meta = vc.meta
        objs = manifests(endpoint, service_cidr)
        key = digest(objs)
        if self._applied.get(meta.uid) == key:
            return
        try:
            await ensure(tenant, objs)
        except (HostUnavailable, HostError) as e:
            log.warning("installing the add-ons of %s/%s: %s", meta.namespace, meta.name, e)
            return
        self._applied[meta.uid] = key
        log.info("add-ons of %s/%s applied (kube-proxy, CoreDNS, kubernetes endpoints at %s)",
                 meta.namespace, meta.name, endpoint)
