"""A tenant control plane's PKI: everything its four components and its admins need.

Generated once per VirtualCluster (ECDSA P-256: fast), serialised as a mapping of
file name → PEM for the encrypted secret store, and renewed when any certificate
nears expiry. Generation is CPU work: call :func:`generate` from a thread.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography import x509

from . import pki, rotation

TENANT_ADMINS = "kosmos:tenant-admins"
# The group that names the issued credential a client certificate is (``kosmos:credential:<name>``): the
# tenant apiserver asks vc-apiserver about requests made with one (revocation), and about no other.
CREDENTIAL_GROUP_PREFIX = "kosmos:credential:"
ADMIN_USER = "kubernetes-admin"  # the server's own credential for the tenant (system:masters)
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
# The Services range of a tenant made before ranges of its own existed, or without a shared slice: what every
# tenant apiserver once ran with, and what promoted nodes' kubelets expect (their clusterDNS is its tenth address).
SHARED_SERVICE_CIDR = "10.96.0.0/16"
# Where the PKI keeps the tenant's Services range: the apiserver's certificate names the range's first address,
# so the two are made, kept and restored together.
SERVICE_CIDR_FILE = "service-cidr"
VALIDITY_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)

# file stem → (CA stem, common name, organizations, usages)
_LEAVES: dict[str, tuple[str, str, tuple[str, ...], tuple[x509.ObjectIdentifier, ...]]] = {
    "apiserver-etcd-client": ("etcd-ca", "kube-apiserver-etcd-client", (), (pki.CLIENT_AUTH,)),
    "front-proxy-client": ("front-proxy-ca", "front-proxy-client", (), (pki.CLIENT_AUTH,)),
    "controller-manager": ("ca", CONTROLLER_MANAGER_USER, (), (pki.CLIENT_AUTH,)),
    "scheduler": ("ca", SCHEDULER_USER, (), (pki.CLIENT_AUTH,)),
    "admin": ("ca", ADMIN_USER, ("system:masters",), (pki.CLIENT_AUTH,)),
    # the apiserver's identity to kubelets (logs, exec, port-forward), as kubeadm's apiserver-kubelet-client
    "apiserver-kubelet-client": ("ca", "kube-apiserver-kubelet-client", ("system:masters",), (pki.CLIENT_AUTH,)),
}


def credential_group(name: str) -> str:
    """The group of the credential ``name`` (a VirtualClusterCredential's name)."""
    return CREDENTIAL_GROUP_PREFIX + name


def credential_of(groups: Iterable[str]) -> str | None:
    """The name of the issued credential among a user's groups, or None for any other user."""
    return next((g[len(CREDENTIAL_GROUP_PREFIX):] for g in groups if g.startswith(CREDENTIAL_GROUP_PREFIX)), None)


def apiserver_sans(endpoint_host: str, extra: Iterable[str], service_ip: str) -> list[str]:
    """SANs of the tenant apiserver: its endpoint, external IPs, in-cluster names, loopback."""
    return list(dict.fromkeys([endpoint_host, *extra, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                               "kubernetes.default.svc.cluster.local", service_ip, "127.0.0.1", "localhost"]))


@dataclass(frozen=True)
class TenantPki:
    """PEM files by name (``ca.crt``, ``ca.key``, ``apiserver.crt``, ``sa.key``, ...)."""

    files: Mapping[str, bytes]

    def cert(self, stem: str) -> x509.Certificate:
        return pki.load_cert(self.files[f"{stem}.crt"])

    def pair(self, stem: str) -> pki.KeyPair:
        return pki.KeyPair(self.cert(stem), pki.load_key(self.files[f"{stem}.key"]))

    @property
    def service_cidr(self) -> str:
        """The tenant's Services range (:data:`SHARED_SERVICE_CIDR` unless it was given one of its own)."""
        return self.files.get(SERVICE_CIDR_FILE, SHARED_SERVICE_CIDR.encode()).decode()

    def sans(self) -> set[str]:
        return pki.names(self.cert("apiserver"))

    def digest(self) -> str:
        """SHA-256 over every file's name and content: whether two PKIs are the same, without keeping one."""
        h = hashlib.sha256()
        for name, pem in sorted(self.files.items()):
            h.update(name.encode() + b"\0" + pem + b"\0")
        return h.hexdigest()

    def needs_renewal(self, now: dt.datetime | None = None) -> bool:
        """A certificate nears expiry, or one this version issues is missing (a PKI made by an earlier one)."""
        now = now or dt.datetime.now(dt.UTC)
        if any(f"{stem}.crt" not in self.files for stem in (*_LEAVES, "client-ca")):
            return True
        return any(pki.load_cert(pem).not_valid_after_utc - now < RENEW_BEFORE
                   for name, pem in self.files.items() if name.endswith(".crt"))

    def webhook_token(self) -> str:
        """The bearer token the tenant apiserver presents to vc-apiserver's authorization webhook: derived
        from the tenant CA's key, so only the server (which keeps that key) and the tenant (which is given
        the token) know it, and nothing new has to be stored."""
        return hmac.new(self.files["ca.key"], b"kosmos.io/tenant-authorization", hashlib.sha256).hexdigest()

    def mint_client(self, user: str, groups: Iterable[str], not_after: dt.datetime) -> pki.KeyPair:
        """A client certificate signed by the cluster CA (what the server hands its own agents)."""
        return pki.new_leaf(self.pair("ca"), user, organizations=tuple(groups), not_after=not_after)

    def issuer(self) -> str:
        """A short name of the client CA that signs users' credentials now (a label value)."""
        return hashlib.sha256(self.files["client-ca.crt"]).hexdigest()[:16]

    def mint_user(self, user: str, groups: Iterable[str], not_after: dt.datetime) -> pki.KeyPair:
        """A client certificate signed by the client CA: a credential issued to a user, which a rotation of
        the client CA replaces (:mod:`certs.rotation`)."""
        return pki.new_leaf(self.pair("client-ca"), user, organizations=tuple(groups), not_after=not_after)


# what a renewal keeps as it was: the rotation's state and the CAs and keys a rotation has in flight
_KEPT = (SERVICE_CIDR_FILE, rotation.STATE_FILE, "client-ca-next.crt", "client-ca-next.key", "client-ca-previous.crt",
         "client-ca-previous.key", "sa-next.key", "sa-previous.key")


def generate(sans: list[str], previous: TenantPki | None = None, service_cidr: str | None = None) -> TenantPki:
    """A full PKI; with ``previous``, its CAs and service-account keys are kept (renewal), and so are where
    a rotation of either stands and the Services range. ``service_cidr`` gives a new PKI a range of its own."""
    files: dict[str, bytes] = {}
    if previous is None and service_cidr is not None:
        files[SERVICE_CIDR_FILE] = service_cidr.encode()
    cas: dict[str, pki.KeyPair] = {}
    for stem, cn in (("ca", "kubernetes"), ("front-proxy-ca", "front-proxy-ca"), ("etcd-ca", "etcd-ca"),
                     ("client-ca", rotation.CLIENT_CA_CN)):
        kept = previous is not None and f"{stem}.crt" in previous.files
        pair = previous.pair(stem) if kept else pki.new_ca(cn)
        cas[stem] = pair
        files[f"{stem}.crt"], files[f"{stem}.key"] = pair.cert_pem, pair.key_pem

    def leaf(stem: str, ca: str, cn: str, orgs: tuple[str, ...], usages: tuple[x509.ObjectIdentifier, ...],
             hosts: Iterable[str] = ()) -> None:
        pair = pki.new_leaf(cas[ca], cn, organizations=orgs, hosts=hosts, usages=usages, days=VALIDITY_DAYS)
        files[f"{stem}.crt"], files[f"{stem}.key"] = pair.cert_pem, pair.key_pem

    leaf("apiserver", "ca", "kube-apiserver", (), (pki.SERVER_AUTH,), sans)
    leaf("etcd-server", "etcd-ca", "etcd-server", (), (pki.SERVER_AUTH, pki.CLIENT_AUTH),
         ["127.0.0.1", "localhost"])
    leaf("etcd-peer", "etcd-ca", "etcd-peer", (), (pki.SERVER_AUTH, pki.CLIENT_AUTH), ["127.0.0.1", "localhost"])
    for stem, (ca, cn, orgs, usages) in _LEAVES.items():
        leaf(stem, ca, cn, orgs, usages)
    files["sa.key"] = previous.files["sa.key"] if previous and "sa.key" in previous.files else pki.key_pem(pki.new_key())
    files.update({k: v for k, v in (previous.files if previous else {}).items() if k in _KEPT})
    return TenantPki(rotation.with_bundles(files))
