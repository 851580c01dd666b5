"""What a ``process`` runtime tenant's components start from: their command lines, and the files those
name (the PKI, the components' kubeconfigs, the apiserver's audit policy) in the tenant's directory.

Every component's command line names the tenant's directory, which is how a process is known to be the
tenant's (:mod:`.supervisor`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from certs import pki as pkilib
from certs.tenant import TenantPki
from reconciler import versions
from reconciler.fileio import write_if_changed
from reconciler.runtime import audit
from reconciler.runtime.authz import TenantAuthorizationWebhook, authorization_config
from reconciler.runtime.base import RuntimeFailure
from reconciler.runtime.flags import apiserver_flags, controller_manager_flags, scheduler_flags
from reconciler.runtime.tuning import TenantTuning

__all__ = ["PORT_SHARING", "READ_AT_START", "commands", "kubernetes_dir", "started_from", "write_files"]

# The files a component reads only when it starts (the apiserver reloads its certificates and client CAs,
# not its service-account keys): when they change (a rotation), it is restarted to read them again.
READ_AT_START = {"kube-apiserver": ("sa.key", "sa.pub"), "kube-controller-manager": ("sa.key",)}


# An apiserver that leaves for another version shares its port with the one replacing it until that one answers
# (SO_REUSEPORT): a connection always finds an apiserver, the new one answering 503 with Retry-After until ready.
PORT_SHARING = ["--permit-port-sharing=true"]


def kubernetes_dir(bin_dir: Path, version: str) -> Path:
    """Where the Kubernetes binaries of ``version`` are (hack/build-bins.sh links each offered version there).
    Raises RuntimeFailure when they are not."""
    found = bin_dir / f"kubernetes-{version}"
    if not (found / "kube-apiserver").exists():
        raise RuntimeFailure("KubernetesVersionNotInstalled",
                             f"Kubernetes {version} is offered (--kubernetes-versions) but not installed: no "
                             f"{found}/kube-apiserver (make bins builds each offered version)")
    return found


def started_from(tenant: TenantPki, component: str) -> str:
    """A digest of what ``component`` reads only at start, as ``tenant`` has it."""
    h = hashlib.sha256()
    for name in READ_AT_START[component]:
        h.update(name.encode() + b"\0" + tenant.files[name] + b"\0")
    return h.hexdigest()


def write_files(base: Path, tenant: TenantPki, server: str, webhook: TenantAuthorizationWebhook | None = None,
                namespace: str = "", name: str = "") -> None:
    """The PKI, the components' kubeconfigs, the apiserver's audit policy and authorization configuration
    (with ``webhook``, the credential webhook of VirtualCluster ``namespace/name``). Every reconcile writes
    these, while components may be (re)starting and reading them: a file is only replaced when its
    content changes, and then atomically."""
    pki_dir = base / "pki"
    pki_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for filename, pem in tenant.files.items():
        write_if_changed(pki_dir / filename, pem, 0o600)
    ca = tenant.files["ca.crt"]
    for stem in ("controller-manager", "scheduler", "admin"):
        config = pkilib.kubeconfig(server, ca, stem, tenant.files[f"{stem}.crt"], tenant.files[f"{stem}.key"])
        write_if_changed(base / f"{stem}.kubeconfig", json.dumps(config).encode(), 0o600)
    write_if_changed(base / "audit-policy.yaml", audit.policy_file(), 0o600)
    hook = base / "authorization-webhook.kubeconfig"
    if webhook is not None:
        write_if_changed(hook, webhook.kubeconfig(namespace, name, tenant), 0o600)
    write_if_changed(base / "authorization-config.yaml",
                     authorization_config(str(hook) if webhook is not None else None), 0o600)


def commands(bin_dir: Path, base: Path, ports: dict[str, int], bind: str, tuning: TenantTuning,
             service_cidr: str, version: str = versions.KUBERNETES_VERSION) -> dict[str, list[str]]:
    """Each component's command line, by binary: the apiserver on ``bind``, everything else on loopback;
    ``service_cidr`` is the tenant's Services range; the Kubernetes components at ``version``."""
    p = base / "pki"
    b = kubernetes_dir(bin_dir, version)
    etcd_url = f"https://127.0.0.1:{ports['etcd-client']}"
    peer_url = f"https://127.0.0.1:{ports['etcd-peer']}"
    return {
        "etcd": [str(bin_dir / "etcd"), "--name", "tenant", "--data-dir", str(base / "etcd"),
                 "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                 "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"tenant={peer_url}", "--listen-metrics-urls", "",
                 "--cert-file", str(p / "etcd-server.crt"), "--key-file", str(p / "etcd-server.key"),
                 "--trusted-ca-file", str(p / "etcd-ca.crt"), "--client-cert-auth",
                 "--peer-cert-file", str(p / "etcd-peer.crt"), "--peer-key-file", str(p / "etcd-peer.key"),
                 "--peer-trusted-ca-file", str(p / "etcd-ca.crt"), "--peer-client-cert-auth",
                 "--log-level", "warn", "--snapshot-count", "10000"],
        "kube-apiserver": [str(b / "kube-apiserver"), *apiserver_flags(
            str(p), bind=bind, advertise=bind, port=ports["apiserver"], etcd_servers=etcd_url,
            audit_policy=str(base / "audit-policy.yaml"), audit_log=str(base / "logs" / "audit.log"),
            authorization_config=str(base / "authorization-config.yaml"), tuning=tuning, handover=PORT_SHARING,
            service_cidr=service_cidr)],
        "kube-controller-manager": [str(b / "kube-controller-manager"), *controller_manager_flags(
            str(p), str(base / "controller-manager.kubeconfig"), bind="127.0.0.1",
            port=ports["controller-manager"], leader_elect=False, service_cidr=service_cidr)],
        "kube-scheduler": [str(b / "kube-scheduler"), *scheduler_flags(
            str(base / "scheduler.kubeconfig"), bind="127.0.0.1", port=ports["scheduler"], leader_elect=False)],
    }
