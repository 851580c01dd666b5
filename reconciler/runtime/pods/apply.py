"""A full pass over one tenant's host objects: what the host holds that they are built from, read
back, and every object of :mod:`.hostobjects` applied, Secrets first.

Two things are kept from what the host holds. etcd's serving and peer certificates are minted here from
the tenant's etcd CA, because the tenant PKI's etcd certificates only name loopback (right for the
``process`` runtime, wrong for pods reached by DNS); they are kept in etcd's Secret and reused until
they near expiry or the CA changes. And a StatefulSet's claim templates cannot change, so a running
etcd keeps the ones it has.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from certs import pki as pkilib
from certs.tenant import RENEW_BEFORE, VALIDITY_DAYS, TenantPki
from reconciler.runtime.base import Obj
from reconciler.runtime.pods.host import Host
from reconciler.runtime.pods.hostobjects import HostObjects, Plan, claim_shape, digest
from reconciler.runtime.pods.startorder import Stage

__all__ = ["apply_all"]

log = logging.getLogger(__name__)


async def apply_all(host: Host, objects: HostObjects, plan: Plan, pki: TenantPki, endpoint: str, port: int,
                    service_ip: str | None, node: str | None, stage: Stage, scheduling: bool) -> None:
    """Apply every object of the tenant: etcd's Services, Secrets, etcd, the apiserver (reached at
    ``endpoint``, on ``port``, in the host at ``service_ip``, preferring ``node`` with hostNetwork), the
    controller-manager and the scheduler (scaled up when ``scheduling``); the workloads ``stage`` does not
    start yet at zero replicas."""
    await host.apply(objects.etcd_service(plan))
    etcd_ip = str((await host.apply(objects.etcd_client_service(plan)))["spec"]["clusterIP"])
    secrets = objects.secrets(plan, pki, endpoint, port, service_ip, await _etcd_certs(host, plan, pki, etcd_ip))
    for secret in secrets.values():
        await host.apply(secret)
    hashes = {c: digest(s["data"]) for c, s in secrets.items()}
    await host.apply(objects.etcd(plan, hashes["etcd"], await _etcd_claims(host, plan)))
    await host.apply(objects.apiserver(plan, port, hashes["apiserver"], node, etcd_ip, stage >= Stage.APISERVER,
                                       pki.service_cidr))
    await host.apply(objects.controller_manager(plan, hashes["controller-manager"], stage == Stage.ALL,
                                                pki.service_cidr))
    await host.apply(objects.scheduler(plan, hashes["scheduler"], scheduling and stage == Stage.ALL))


async def _etcd_certs(host: Host, plan: Plan, pki: TenantPki, client_ip: str) -> dict[str, bytes | str]:
    """etcd serving and peer certificates for its DNS names and its client Service's IP: the ones in the
    Secret while still good."""
    hosts = [f"*.{plan.etcd_service_dns}", f"*.{plan.etcd_service_dns}.cluster.local", plan.etcd_service_dns,
             "localhost", "127.0.0.1", client_ip]
    existing = await host.get("Secret", plan.namespace, plan.object_name("etcd"))
    old = {k: base64.b64decode(v) for k, v in ((existing or {}).get("data") or {}).items()}
    out: dict[str, bytes | str] = {"etcd-ca.crt": pki.files["etcd-ca.crt"]}
    for stem in ("etcd-server", "etcd-peer"):
        crt, key = old.get(f"{stem}.crt"), old.get(f"{stem}.key")
        if crt is None or key is None or not _still_good(crt, pki.cert("etcd-ca"), hosts):
            pair = await asyncio.to_thread(pkilib.new_leaf, pki.pair("etcd-ca"), stem, hosts=hosts,
                                           usages=(pkilib.SERVER_AUTH, pkilib.CLIENT_AUTH), days=VALIDITY_DAYS)
            crt, key = pair.cert_pem, pair.key_pem
        out[f"{stem}.crt"], out[f"{stem}.key"] = crt, key
    return out


async def _etcd_claims(host: Host, plan: Plan) -> list[Obj]:
    """etcd's claim templates: the plan's, or the running StatefulSet's (a changed etcdStorageClass or
    etcdUnitSize cannot reach a running etcd)."""
    claim = plan.data_claim()
    existing = await host.get("StatefulSet", plan.namespace, plan.object_name("etcd"))
    if existing is None or not existing["spec"].get("volumeClaimTemplates"):
        return [claim]
    claims: list[Obj] = existing["spec"]["volumeClaimTemplates"]
    if claim_shape(claims[0]) != claim_shape(claim):
        log.warning("%s/%s: etcd volumes keep %s; the spec's %s applies to new clusters only",
                    plan.namespace, plan.name, claim_shape(claims[0]), claim_shape(claim))
    return claims


def _still_good(crt: bytes, ca: x509.Certificate, hosts: list[str]) -> bool:
    """Issued by this CA, naming these hosts, and not about to expire."""
    try:
        cert = pkilib.load_cert(crt)
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    named = {str(n) for n in sans.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return set(hosts) <= named and cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_BEFORE
