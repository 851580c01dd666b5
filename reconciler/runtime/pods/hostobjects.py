"""The host objects of one tenant control plane, as the ``pods`` runtime applies them.

Built from a :class:`Plan` (what a VirtualCluster's spec asks of the host) and the tenant's PKI,
without a host call: what the host already holds (the etcd volumes' claim templates, the control-plane
nodes) is handed in. Pod templates carry a hash of their Secret and are compared by the host's
controllers, so these builders must stay deterministic: the same inputs give the same bytes, and an
upgrade that changes nothing here restarts no tenant.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Self

from certs import pki as pkilib
from certs.tenant import TenantPki
from reconciler import versions
from reconciler.runtime import audit
from reconciler.runtime.authz import TenantAuthorizationWebhook, authorization_config
from reconciler.runtime.base import BINARIES, FIELD_MANAGER, Obj, RuntimeFailure
from reconciler.runtime.flags import (
    ENDPOINT_DRAIN,
    apiserver_flags,
    controller_manager_flags,
    scheduler_flags,
)
from reconciler.runtime.tuning import LEAN, TenantTuning

__all__ = [
    "COMPONENT", "COMPONENTS", "CONTROL_PLANE_ROLE", "ETCD_CLIENT", "ETCD_IMAGE", "ETCD_PEER", "KUBERNETES_VERSION",
    "MANAGED_BY", "OWNER", "HostObjects", "Plan", "claim_shape", "digest", "selector", "url",
]

# Pinned in reconciler/versions.env: the versions built by hack/build-bins.sh and imaged by hack/images.
KUBERNETES_VERSION = versions.KUBERNETES_VERSION
ETCD_IMAGE = versions.ETCD_IMAGE
MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
OWNER = "kosmos.io/virtualcluster"
PKI_HASH = "kosmos.io/pki-hash"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"

APISERVER_PORT = 6443
ETCD_CLIENT, ETCD_PEER, ETCD_PROBE = 2379, 2380, 2381
PKI_DIR = "/etc/kubernetes/pki"
CONFIG_DIR = "/etc/kubernetes/config"
KUBECONFIG = f"{CONFIG_DIR}/kubeconfig"  # the controller-manager's and the scheduler's, from their Secrets
AUDIT_POLICY = "audit-policy.yaml"  # in the apiserver's Secret, beside its PKI
AUTHZ_CONFIG = "authorization-config.yaml"  # there too: Node, the credential webhook, RBAC
AUTHZ_WEBHOOK = "authorization-webhook.kubeconfig"
COMPONENTS = ("etcd", "apiserver", "controller-manager", "scheduler")
BINARY = dict(zip(COMPONENTS, BINARIES, strict=True))  # each component's binary (its image's name too)
MAX_STS_NAME = 52  # a StatefulSet's name + its revision hash must fit a 63-character label


def url(host: str, port: int) -> str:
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def selector(owner: str, component: str | None = None) -> str:
    """The label selector of one tenant's host objects (of one of its components)."""
    return f"{MANAGED_BY}={FIELD_MANAGER},{OWNER}={owner}" + (f",{COMPONENT}={component}" if component else "")


def digest(data: dict[str, str]) -> str:
    """The pod-template annotation of a Secret's data: a changed Secret rolls the pods that mount it."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Plan:
    """What one VirtualCluster's spec asks of the host, with the runtime's defaults filled in."""

    namespace: str
    name: str
    endpoint_host: str
    host_network: bool
    replicas: int
    external_port: int | None
    storage_class: str | None
    storage_size: str

    @classmethod
    def of(cls, vc: Obj, endpoint_host: str) -> Self:
        """What ``vc`` asks for; raises RuntimeFailure for a name its objects' names cannot carry."""
        meta, spec = vc["metadata"], vc.get("spec") or {}
        shape = spec.get("kubeInKubeConfig") or {}
        name = meta["name"]
        if len(f"{name}-etcd") > MAX_STS_NAME:
            raise RuntimeFailure("NameTooLong", f"the pods runtime names host objects <name>-etcd, which must be at "
                                                f"most {MAX_STS_NAME} characters; use a name of at most "
                                                f"{MAX_STS_NAME - 5}")
        return cls(namespace=meta["namespace"], name=name, endpoint_host=endpoint_host,
                   host_network=shape.get("apiServerServiceType") == "hostNetwork",
                   replicas=int(shape.get("apiServerReplicas") or 1),
                   external_port=int(shape["externalPort"]) if shape.get("externalPort") else None,
                   storage_class=shape.get("etcdStorageClass") or None,
                   storage_size=str(shape.get("etcdUnitSize") or "1Gi"))

    def object_name(self, component: str) -> str:
        return f"{self.name}-{component}"

    def labels(self, component: str) -> dict[str, str]:
        return {MANAGED_BY: FIELD_MANAGER, OWNER: self.name, COMPONENT: component}

    @property
    def etcd_service_dns(self) -> str:
        return f"{self.object_name('etcd')}.{self.namespace}.svc"

    def etcd_member(self, index: int) -> str:
        return f"{self.object_name('etcd')}-{index}.{self.etcd_service_dns}"

    @property
    def selector(self) -> str:
        return selector(self.name)

    @property
    def cluster_token(self) -> str:
        return f"{self.namespace}-{self.name}"

    def data_claim(self) -> Obj:
        """The etcd StatefulSet's claim template (its claims are ``data-<member>``)."""
        claim: Obj = {"metadata": {"name": "data", "labels": self.labels("etcd")},
                      "spec": {"accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": self.storage_size}}}}
        if self.storage_class:
            claim["spec"]["storageClassName"] = self.storage_class
        return claim

    def member_claim(self, member: str) -> Obj:
        """The data claim of one etcd member, as its StatefulSet would make it (and adopts, by name)."""
        claim = self.data_claim()
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {**claim["metadata"], "name": f"{claim['metadata']['name']}-{member}",
                             "namespace": self.namespace},
                "spec": claim["spec"]}


@dataclass(frozen=True)
class HostObjects:
    """The images, the etcd size and the tuning every tenant's objects are built with."""

    registry: str = "registry.k8s.io"
    kubernetes_version: str = KUBERNETES_VERSION
    etcd_image: str = ETCD_IMAGE
    etcd_replicas: int = 1
    tuning: TenantTuning = LEAN
    webhook: TenantAuthorizationWebhook | None = None  # vc-apiserver's credential webhook, as tenant pods reach it
    apiserver_version: str = ""  # the apiserver's, while an upgrade has moved it first ('': kubernetes_version)

    # -- secrets -------------------------------------------------------------------------

    def secrets(self, plan: Plan, pki: TenantPki, endpoint: str, port: int, service_ip: str | None,
                etcd_certs: dict[str, bytes | str]) -> dict[str, Obj]:
        """One Secret per component (and the admin kubeconfig), keyed by component; ``etcd_certs`` are
        etcd's serving and peer pairs for its DNS names, which the tenant PKI's (loopback only) are not."""
        f = pki.files
        # in-cluster components reach a NodePort apiserver at its Service's IP (``service_ip``; not by name,
        # which the cluster DNS may answer from a recreated Service's past), naming a SAN it has
        internal: tuple[str, str | None] = (url(plan.endpoint_host, port), None)
        if service_ip:
            internal = (url(service_ip, APISERVER_PORT), "kubernetes")
        return {
            "etcd": self.secret(plan, "etcd", etcd_certs),
            "apiserver": self.secret(plan, "apiserver", {**{k: f[k] for k in (
                "ca.crt", "client-ca-bundle.crt", "apiserver.crt", "apiserver.key", "apiserver-etcd-client.crt", "apiserver-etcd-client.key",
                "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key", "etcd-ca.crt", "front-proxy-ca.crt",
                "front-proxy-client.crt", "front-proxy-client.key", "sa.pub", "sa.key")}, AUDIT_POLICY: audit.policy_file(),
                **self._authorization_files(plan, pki)}),
            "controller-manager": self.secret(plan, "controller-manager", {
                "ca.crt": f["ca.crt"], "ca.key": f["ca.key"], "sa.key": f["sa.key"],
                "kubeconfig": _kubeconfig(pki, "controller-manager", *internal)}),
            "scheduler": self.secret(plan, "scheduler", {"kubeconfig": _kubeconfig(pki, "scheduler", *internal)}),
            "admin": self.secret(plan, "admin", {"kubeconfig": _kubeconfig(pki, "admin", endpoint, None)}),
        }

    def _authorization_files(self, plan: Plan, pki: TenantPki) -> dict[str, bytes | str]:
        """The apiserver's authorization configuration and, when there is one, its webhook's kubeconfig."""
        if self.webhook is None:
            return {AUTHZ_CONFIG: authorization_config(None)}
        return {AUTHZ_CONFIG: authorization_config(f"{PKI_DIR}/{AUTHZ_WEBHOOK}"),
                AUTHZ_WEBHOOK: self.webhook.kubeconfig(plan.namespace, plan.name, pki)}

    def secret(self, plan: Plan, component: str, files: dict[str, bytes | str]) -> Obj:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": self.meta(plan, component),
                "data": {k: _b64(v) for k, v in sorted(files.items())}}

    # -- workloads -----------------------------------------------------------------------

    def meta(self, plan: Plan, component: str, suffix: str = "") -> Obj:
        return {"name": plan.object_name(component) + suffix, "namespace": plan.namespace,
                "labels": plan.labels(component)}

    def pod_spec(self, plan: Plan, component: str, container: Obj, volumes: list[Obj]) -> Obj:
        """Common to every component: control-plane nodes only, no host API token, spread when replicated;
        the components' Go runtime tuning."""
        if component in COMPONENTS:
            env = [{"name": k, "value": v} for k, v in self.tuning.env(BINARY[component]).items()]
            container = {**container, "env": [*container.get("env", []), *env]}
        return {
            "nodeSelector": {CONTROL_PLANE_ROLE: ""},
            "tolerations": [{"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                   "labelSelector": {"matchLabels": plan.labels(component)}}}]}},
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": volumes,
        }

    def _template(self, plan: Plan, component: str, pki_hash: str, spec: Obj) -> Obj:
        return {"metadata": {"labels": plan.labels(component), "annotations": {PKI_HASH: pki_hash}}, "spec": spec}

    def _secret_volume(self, plan: Plan, component: str, volume: str) -> Obj:
        return {"name": volume, "secret": {"secretName": plan.object_name(component), "defaultMode": 0o400}}

    def _deployment(self, plan: Plan, component: str, replicas: int, template: Obj,
                    strategy: Obj | None = None) -> Obj:
        spec: Obj = {"replicas": replicas, "selector": {"matchLabels": plan.labels(component)}, "template": template}
        if strategy:
            spec["strategy"] = strategy
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": self.meta(plan, component), "spec": spec}

    def image(self, component: str) -> str:
        version = self.apiserver_version if component == "apiserver" and self.apiserver_version else \
            self.kubernetes_version
        return f"{self.registry}/{BINARY[component]}:{version}"

    def etcd_service(self, plan: Plan) -> Obj:
        """Headless, for the members' own names (peers, and what they advertise)."""
        return {"apiVersion": "v1", "kind": "Service", "metadata": self.meta(plan, "etcd"),
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": plan.labels("etcd"),
                         "ports": [{"name": "client", "port": ETCD_CLIENT, "targetPort": ETCD_CLIENT},
                                   {"name": "peer", "port": ETCD_PEER, "targetPort": ETCD_PEER}]}}

    def etcd_client_service(self, plan: Plan) -> Obj:
        """What the apiserver dials etcd at, by its cluster IP: a member's name looked up before its pod has an
        address is cached as missing by the cluster DNS, and a recreated member's old address as present, each
        for longer than the apiserver waits for etcd at start; a Service's IP has neither problem."""
        return {"apiVersion": "v1", "kind": "Service", "metadata": self.meta(plan, "etcd", "-client"),
                "spec": {"type": "ClusterIP", "selector": plan.labels("etcd"),
                         "ports": [{"name": "client", "port": ETCD_CLIENT, "targetPort": ETCD_CLIENT}]}}

    def apiserver_service(self, plan: Plan) -> Obj:
        port: Obj = {"name": "https", "port": APISERVER_PORT, "targetPort": APISERVER_PORT, "protocol": "TCP"}
        if plan.external_port:
            port["nodePort"] = plan.external_port
        return {"apiVersion": "v1", "kind": "Service", "metadata": self.meta(plan, "apiserver"),
                "spec": {"type": "NodePort", "selector": plan.labels("apiserver"), "ports": [port]}}

    def members(self, plan: Plan) -> list[str]:
        return [f"{plan.object_name('etcd')}-{i}" for i in range(self.etcd_replicas)]

    def initial_cluster(self, plan: Plan) -> str:
        return ",".join(f"{m}=https://{plan.etcd_member(i)}:{ETCD_PEER}" for i, m in enumerate(self.members(plan)))

    def etcd(self, plan: Plan, pki_hash: str, claims: list[Obj]) -> Obj:
        """etcd's StatefulSet; ``claims`` are its volume claim templates (immutable once it exists)."""
        pod_dns = f"$(POD_NAME).{plan.etcd_service_dns}"
        p = "/etc/etcd/pki"
        container = {
            "name": "etcd", "image": self.etcd_image,
            "command": [
                "etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data",
                f"--listen-client-urls=https://0.0.0.0:{ETCD_CLIENT}",
                f"--advertise-client-urls=https://{pod_dns}:{ETCD_CLIENT}",
                f"--listen-peer-urls=https://0.0.0.0:{ETCD_PEER}",
                f"--initial-advertise-peer-urls=https://{pod_dns}:{ETCD_PEER}",
                f"--initial-cluster={self.initial_cluster(plan)}",
                "--initial-cluster-state=new", f"--initial-cluster-token={plan.cluster_token}",
                f"--listen-metrics-urls=http://0.0.0.0:{ETCD_PROBE}",
                f"--cert-file={p}/etcd-server.crt", f"--key-file={p}/etcd-server.key",
                f"--trusted-ca-file={p}/etcd-ca.crt", "--client-cert-auth",
                f"--peer-cert-file={p}/etcd-peer.crt", f"--peer-key-file={p}/etcd-peer.key",
                f"--peer-trusted-ca-file={p}/etcd-ca.crt", "--peer-client-cert-auth",
                "--log-level=warn", "--snapshot-count=10000"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "ports": [{"name": "client", "containerPort": ETCD_CLIENT}, {"name": "peer", "containerPort": ETCD_PEER},
                      {"name": "probe", "containerPort": ETCD_PROBE}],
            **_probes("/livez", "/readyz", ETCD_PROBE, "HTTP"),
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"},
                             {"name": "pki", "mountPath": p, "readOnly": True}],
        }
        return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": self.meta(plan, "etcd"),
                "spec": {"replicas": self.etcd_replicas, "serviceName": plan.object_name("etcd"),
                         "podManagementPolicy": "Parallel",  # members need each other to become ready
                         "selector": {"matchLabels": plan.labels("etcd")},
                         "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
                         "template": self._template(plan, "etcd", pki_hash, self.pod_spec(
                             plan, "etcd", container, [self._secret_volume(plan, "etcd", "pki")])),
                         "volumeClaimTemplates": claims}}

    def apiserver(self, plan: Plan, host_port: int, pki_hash: str, node: str | None, etcd_ip: str,
                  running: bool, service_cidr: str) -> Obj:
        """kube-apiserver's Deployment, dialling etcd at its client Service's IP, scaled to zero until
        ``running`` (:mod:`.startorder`); with hostNetwork it prefers ``node``, the one users are sent to."""
        port = host_port if plan.host_network else APISERVER_PORT
        p = PKI_DIR
        etcd = url(etcd_ip, ETCD_CLIENT)
        container = {
            "name": "kube-apiserver", "image": self.image("apiserver"),
            "command": ["kube-apiserver", *apiserver_flags(
                p, bind="0.0.0.0", advertise="$(POD_IP)", port=port, etcd_servers=etcd,
                audit_policy=f"{p}/{AUDIT_POLICY}", audit_log="-", authorization_config=f"{p}/{AUTHZ_CONFIG}",
                tuning=self.tuning, handover=ENDPOINT_DRAIN, service_cidr=service_cidr)],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "https", "containerPort": port, **({"hostPort": port} if plan.host_network else {})}],
            **_probes("/livez", "/readyz", port, "HTTPS"),
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
            "volumeMounts": [{"name": "pki", "mountPath": p, "readOnly": True}],
        }
        spec = self.pod_spec(plan, "apiserver", container, [self._secret_volume(plan, "apiserver", "pki")])
        # replaced: 5 s still serving while it leaves the endpoints (ENDPOINT_DRAIN), then 10 s for what it is
        # answering; a rotation's next step waits for it to be gone
        spec["terminationGracePeriodSeconds"] = 15
        strategy = None
        if plan.host_network:
            # a host port can't be shared: replace pods in place, and prefer the node users are sent to
            spec.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
            strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
            if node:
                spec["affinity"]["nodeAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100, "preference": {"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}}]}
        return self._deployment(plan, "apiserver", plan.replicas if running else 0,
                                self._template(plan, "apiserver", pki_hash, spec), strategy)

    def _kube_component(self, plan: Plan, component: str, pki_hash: str, flags: list[str], port: int,
                        cpu: str, replicas: int = 1) -> Obj:
        """controller-manager or scheduler: a kubeconfig from its Secret, health on its secure port."""
        container = {
            "name": BINARY[component], "image": self.image(component), "command": [BINARY[component], *flags],
            "ports": [{"name": "https", "containerPort": port}],
            **_probes("/healthz", None, port, "HTTPS"),
            "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}},
            "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        }
        spec = self.pod_spec(plan, component, container, [self._secret_volume(plan, component, "config")])
        return self._deployment(plan, component, replicas, self._template(plan, component, pki_hash, spec))

    def controller_manager(self, plan: Plan, pki_hash: str, running: bool, service_cidr: str) -> Obj:
        """Scaled to zero until its apiserver answers (:mod:`.startorder`)."""
        port = 10257
        return self._kube_component(plan, "controller-manager", pki_hash, controller_manager_flags(
            CONFIG_DIR, KUBECONFIG, bind="0.0.0.0", port=port, leader_elect=True, service_cidr=service_cidr), port,
            "200m", 1 if running else 0)

    def scheduler(self, plan: Plan, pki_hash: str, running: bool) -> Obj:
        """Scaled to zero until the tenant has something to schedule (:mod:`.scheduling`)."""
        port = 10259
        return self._kube_component(plan, "scheduler", pki_hash, scheduler_flags(
            KUBECONFIG, bind="0.0.0.0", port=port, leader_elect=True), port, "100m", 1 if running else 0)


def claim_shape(claim: Obj) -> tuple[str | None, str | None]:
    """(storage class, size) of a claim template: what a running etcd's volumes keep."""
    spec = claim.get("spec") or {}
    return spec.get("storageClassName"), ((spec.get("resources") or {}).get("requests") or {}).get("storage")


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _kubeconfig(pki: TenantPki, stem: str, server: str, tls_server_name: str | None) -> str:
    config = pkilib.kubeconfig(server, pki.files["ca.crt"], stem, pki.files[f"{stem}.crt"], pki.files[f"{stem}.key"],
                               cluster="tenant")
    if tls_server_name:
        config["clusters"][0]["cluster"]["tls-server-name"] = tls_server_name
    return json.dumps(config, sort_keys=True)


def _probes(live: str, ready: str | None, port: int, scheme: str) -> Obj:
    """A startup probe asked every second (for five minutes), so a component is known live the second it
    is, and is not killed while it starts; then liveness as kubeadm's (8 misses 10 s apart), and readiness
    every second, as kubeadm's apiserver: a Service sends nothing to a pod until it is ready."""
    def probe(path: str, period: int, failures: int) -> Obj:
        return {"httpGet": {"path": path, "port": port, "scheme": scheme}, "periodSeconds": period,
                "timeoutSeconds": 5, "failureThreshold": failures}
    probes = {"startupProbe": probe(live, 1, 300), "livenessProbe": probe(live, 10, 8)}
    if ready:
        probes["readinessProbe"] = probe(ready, 1, 3)
    return probes
