"""The certificates an installation needs, as files in one directory.

- ``ca.crt``/``ca.key``: the serving CA; ``ca.crt`` is the APIService ``caBundle``.
- ``serving.crt``/``serving.key``: vc-apiserver's serving certificate. The aggregator verifies it
  for ``<service>.<namespace>.svc`` whatever address it dials.
- ``etcd-ca``, ``etcd-server`` (serving and peer), ``etcd-client`` (vc-apiserver): the dedicated
  etcd's mutual TLS, in-cluster only.
- With the node agent (``--node-joiner agent``), its mutual TLS, one CA per direction:
  ``node-agent-ca`` signs ``node-agent-serving``, the one serving certificate of every agent
  (CN and DNS SAN ``kosmos-node-agent``, the name the joiner pins: agents are dialled at node
  addresses no install-time certificate can name; see ``reconciler.nodes.agentjoiner.PinnedNameContext``);
  ``node-agent-client-ca`` signs ``node-agent-client``, vc-apiserver's client certificate
  (CN ``kosmos:node-agent-client``, the name agents allow). Each side trusts only the CA of the
  other, so the serving key that every node holds is no client credential anywhere, and neither
  CA signs anything else. Plus ``encryption.key``, the AES key of the tenant keys vc-apiserver
  stores (the agent joiner needs a control-plane runtime), created once and never replaced.

Everything present is reused, so re-running an install never changes the ``caBundle`` under a
running server. A leaf is reissued from the same CA only when it misses a name it must carry,
was not issued by that CA, or is close to expiry; names it already carried are kept.
(The directory layout matches ``hack.harness.Pki``: ``ca.crt`` + ``serving.*``.)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import pki
from reconciler.nodeagent import CLIENT_CN as AGENT_CLIENT_CN
from reconciler.nodeagent import SERVING_NAME as AGENT_SERVING_NAME

SERVICE = "vc-apiserver"
NAMESPACE = "kosmos-system"
LOCAL_HOSTS = ("localhost", "127.0.0.1")
ETCD_SERVICE = "vc-apiserver-etcd"  # headless: members are <statefulset>-<i>.<this>.<ns>.svc
ETCD_CLIENT_SERVICE = "vc-apiserver-etcd-client"
ETCD_REPLICAS = 3  # the StatefulSet's replicas in deploy/cluster/etcd.yaml
ETCD_CLIENT_USER = "vc-apiserver"
RENEW_BEFORE = dt.timedelta(days=30)

SERVING_CA, SERVING = "ca", "serving"
ETCD_CA, ETCD_SERVER, ETCD_CLIENT = "etcd-ca", "etcd-server", "etcd-client"
AGENT_CA, AGENT_SERVING = "node-agent-ca", "node-agent-serving"
AGENT_CLIENT_CA, AGENT_CLIENT = "node-agent-client-ca", "node-agent-client"
ENCRYPTION_KEY = "encryption.key"


@dataclass(frozen=True)
class CertDir:
    path: Path

    def crt(self, stem: str) -> Path:
        return self.path / f"{stem}.crt"

    def key(self, stem: str) -> Path:
        return self.path / f"{stem}.key"

    def has(self, stem: str) -> bool:
        return self.crt(stem).exists() and self.key(stem).exists()

    @property
    def ca_bundle(self) -> bytes:
        return self.crt(SERVING_CA).read_bytes()


def service_hosts(service: str = SERVICE, namespace: str = NAMESPACE) -> list[str]:
    """Every name a Service is reached by in-cluster; ``<svc>.<ns>.svc`` is the aggregator's."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def etcd_hosts(namespace: str = NAMESPACE, replicas: int = ETCD_REPLICAS) -> list[str]:
    """Each member by name (etcd resolves a peer's certificate names to check its address), the
    client Service, and loopback for etcdctl inside a member."""
    members = [f"{ETCD_SERVICE}-{i}.{ETCD_SERVICE}.{namespace}.svc" for i in range(replicas)]
    return [*members, *(f"{m}.cluster.local" for m in members), *service_hosts(ETCD_CLIENT_SERVICE, namespace),
            *LOCAL_HOSTS]


def sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*ext.get_values_for_type(x509.DNSName), *(str(ip) for ip in ext.get_values_for_type(x509.IPAddress))]


def _same_host(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a.lower() == b.lower()


def _usable(leaf: x509.Certificate, ca: x509.Certificate, hosts: Sequence[str]) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):  # another CA's leaf
        return False
    have = sans(leaf)
    names_ok = all(any(_same_host(h, n) for n in have) for h in hosts)
    return names_ok and leaf.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_BEFORE


def ensure_ca(certs: CertDir, stem: str, common_name: str) -> pki.KeyPair:
    if certs.has(stem):
        return pki.KeyPair.read(certs.path, stem)
    ca = pki.new_ca(common_name)
    ca.write(certs.path, stem)
    return ca


def ensure_leaf(certs: CertDir, stem: str, ca: pki.KeyPair, common_name: str, hosts: Sequence[str],
                usages: Sequence[x509.ObjectIdentifier]) -> pki.KeyPair:
    if certs.has(stem):
        current = pki.KeyPair.read(certs.path, stem)
        if _usable(current.cert, ca.cert, hosts):
            return current
        hosts = [*hosts, *sans(current.cert)]
    leaf = pki.new_leaf(ca, common_name, hosts=hosts, usages=usages)
    leaf.write(certs.path, stem)
    return leaf


def ensure_serving(certs: CertDir, service: str = SERVICE, namespace: str = NAMESPACE,
                   local: bool = False) -> None:
    """The serving CA and certificate; ``local`` adds the loopback names a local server is reached by."""
    ca = ensure_ca(certs, SERVING_CA, f"{service}-serving-ca")
    hosts = service_hosts(service, namespace) + (list(LOCAL_HOSTS) if local else [])
    ensure_leaf(certs, SERVING, ca, service, hosts, (ExtendedKeyUsageOID.SERVER_AUTH,))


def ensure_etcd(certs: CertDir, namespace: str = NAMESPACE) -> None:
    """etcd's CA, one certificate for members (serving and peering), and vc-apiserver's client cert."""
    ca = ensure_ca(certs, ETCD_CA, f"{ETCD_SERVICE}-ca")
    ensure_leaf(certs, ETCD_SERVER, ca, ETCD_SERVICE, etcd_hosts(namespace),
                (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH))
    ensure_leaf(certs, ETCD_CLIENT, ca, ETCD_CLIENT_USER, (), (ExtendedKeyUsageOID.CLIENT_AUTH,))


def ensure_node_agent(certs: CertDir) -> None:
    """The node agents' serving certificate and vc-apiserver's client certificate, each from its own CA."""
    ca = ensure_ca(certs, AGENT_CA, f"{AGENT_SERVING_NAME}-ca")
    ensure_leaf(certs, AGENT_SERVING, ca, AGENT_SERVING_NAME, (AGENT_SERVING_NAME,), (ExtendedKeyUsageOID.SERVER_AUTH,))
    client_ca = ensure_ca(certs, AGENT_CLIENT_CA, f"{AGENT_SERVING_NAME}-client-ca")
    ensure_leaf(certs, AGENT_CLIENT, client_ca, AGENT_CLIENT_CN, (), (ExtendedKeyUsageOID.CLIENT_AUTH,))


def ensure_encryption_key(certs: CertDir) -> Path:
    """Created once: a new key would make every stored tenant key unreadable."""
    from apiserver.storage.secrets import generate_key_file  # lazily: it brings the etcd client along

    path = certs.path / ENCRYPTION_KEY
    return path if path.exists() else generate_key_file(path)


def ensure_certs(directory: Path, service: str = SERVICE, namespace: str = NAMESPACE,
                 local: bool = False, node_agent: bool = False) -> CertDir:
    """What ``install --mode local`` (``local``) or ``--mode cluster`` needs, created or reused;
    ``node_agent`` adds the node agent's PKI (and, in-cluster, the encryption key)."""
    certs = CertDir(directory)
    ensure_serving(certs, service, namespace, local)
    if not local:
        ensure_etcd(certs, namespace)
    if node_agent:
        ensure_node_agent(certs)
        if not local:
            ensure_encryption_key(certs)
    return certs
