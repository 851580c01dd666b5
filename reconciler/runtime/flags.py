"""What the tenant's kube components are told on their command lines, written once for both runtimes.

The runtimes differ only in where things are (the PKI's directory, the kubeconfig, the etcd members,
the audit log), in the address a component binds, and in leader election (the pods runtime's
Deployments can run two at once while they roll; the process runtime starts exactly one of each).
The pods runtime's pod templates are hashed: these lists keep their order, so an upgrade that does
not change a flag restarts no tenant.
"""

from __future__ import annotations

from reconciler.runtime import audit
from reconciler.runtime.tuning import TenantTuning

__all__ = ["ENDPOINT_DRAIN", "apiserver_flags", "controller_manager_flags", "kubelet_client_flags", "scheduler_flags"]

# Controllers for what a tenant does not have: node IP ranges (nodes come with theirs), a cloud's nodes
# and load balancers.
CONTROLLERS = "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller"


# A replacement apiserver pod (new certificates, a rotated service-account key) takes over without a refused
# request: the old one keeps answering while it leaves its Service's endpoints, long enough for every
# node's proxy to stop sending it new connections, then drains what it has.
ENDPOINT_DRAIN = ["--shutdown-delay-duration=5s"]


def kubelet_client_flags(pki_dir: str) -> list[str]:
    """How a tenant apiserver reaches kubelets (logs, exec, port-forward): with a client certificate of the
    tenant CA, which a promoted node's kubelet trusts once its node agent hands it that CA, and at the
    node's InternalIP (node names need not resolve where the apiserver runs)."""
    return [f"--kubelet-client-certificate={pki_dir}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={pki_dir}/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types=InternalIP,Hostname,ExternalIP"]


def apiserver_flags(pki: str, *, bind: str, advertise: str, port: int, etcd_servers: str, audit_policy: str,
                    audit_log: str, authorization_config: str, tuning: TenantTuning,
                    handover: list[str], service_cidr: str) -> list[str]:
    """kube-apiserver's flags, its certificates and keys in directory ``pki``; ``service_cidr`` the tenant's
    Services range (:attr:`certs.tenant.TenantPki.service_cidr`); ``audit_log`` a file or ``-``;
    ``authorization_config`` the file :func:`reconciler.runtime.authz.authorization_config` wrote;
    ``handover`` how it leaves when it is replaced (:data:`ENDPOINT_DRAIN` behind a Service, port sharing for
    a process)."""
    return [
        f"--bind-address={bind}", f"--advertise-address={advertise}",
        f"--secure-port={port}", "--endpoint-reconciler-type=none",
        f"--etcd-servers={etcd_servers}", f"--etcd-cafile={pki}/etcd-ca.crt",
        f"--etcd-certfile={pki}/apiserver-etcd-client.crt", f"--etcd-keyfile={pki}/apiserver-etcd-client.key",
        f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
        f"--client-ca-file={pki}/client-ca-bundle.crt", f"--authorization-config={authorization_config}",
        f"--requestheader-client-ca-file={pki}/front-proxy-ca.crt",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki}/front-proxy-client.crt",
        f"--proxy-client-key-file={pki}/front-proxy-client.key",
        # Webhooks and aggregated APIs are dialled at their endpoints' pod IPs, which the host routes, not at
        # their ClusterIP: no tenant proxy runs where the apiserver does, and a dedicated tenant's range is
        # the host's own, so the host would answer a tenant's ClusterIP with one of its own Services.
        "--enable-aggregator-routing=true",
        "--service-account-issuer=https://kubernetes.default.svc",
        # The key set where the issuer is, under a name the serving certificate holds (the default, the
        # advertised address, is a pod IP in the pods runtime, which no certificate names).
        "--service-account-jwks-uri=https://kubernetes.default.svc/openid/v1/jwks",
        f"--service-account-key-file={pki}/sa.pub", f"--service-account-signing-key-file={pki}/sa.key",
        f"--service-cluster-ip-range={service_cidr}", "--allow-privileged=true", "--profiling=false",
        *kubelet_client_flags(pki), "--enable-admission-plugins=NodeRestriction", "--v=1",
        *handover, *tuning.apiserver_flags(), *audit.flags(audit_policy, audit_log)]


def _client_component(kubeconfig: str, bind: str, port: int, leader_elect: bool, own: list[str]) -> list[str]:
    """The controller-manager's and the scheduler's: one kubeconfig for everything, health on ``port``."""
    return [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", f"--bind-address={bind}", f"--secure-port={port}",
            f"--leader-elect={str(leader_elect).lower()}", *own, "--profiling=false", "--v=1"]


def controller_manager_flags(keys: str, kubeconfig: str, *, bind: str, port: int, leader_elect: bool,
                             service_cidr: str) -> list[str]:
    """kube-controller-manager's flags; ``keys`` holds the CA's pair and the service-account key."""
    return _client_component(kubeconfig, bind, port, leader_elect, [
        f"--service-account-private-key-file={keys}/sa.key", f"--root-ca-file={keys}/ca.crt",
        f"--cluster-signing-cert-file={keys}/ca.crt", f"--cluster-signing-key-file={keys}/ca.key",
        "--use-service-account-credentials=true", f"--service-cluster-ip-range={service_cidr}",
        f"--controllers={CONTROLLERS}"])


def scheduler_flags(kubeconfig: str, *, bind: str, port: int, leader_elect: bool) -> list[str]:
    return _client_component(kubeconfig, bind, port, leader_elect, [])
