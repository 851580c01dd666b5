"""PKI with ``cryptography``: CAs, leaf certificates, PEM files and kubeconfigs.

ECDSA P-256 by default (fast to generate and to verify); RSA where a consumer
needs it (kube-apiserver's service-account signing key).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH


def new_key(kind: str = "ecdsa") -> PrivateKey:
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_pem(key: PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def load_key(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey))
    return key


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class KeyPair:
    cert: x509.Certificate
    key: PrivateKey

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key_pem)
        return crt, key

    @classmethod
    def read(cls, directory: Path, stem: str) -> KeyPair:
        return cls(load_cert((directory / f"{stem}.crt").read_bytes()),
                   load_key((directory / f"{stem}.key").read_bytes()))


def new_ca(common_name: str, days: int = 3650, key_kind: str = "ecdsa") -> KeyPair:
    key = new_key(key_kind)
    name = _name(common_name)
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(cert, key)


def _sans(hosts: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in dict.fromkeys(h for h in hosts if h):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def names(cert: x509.Certificate) -> set[str]:
    """The DNS names and IP addresses a certificate is valid for."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in ext.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}


def new_leaf(ca: KeyPair, common_name: str, *, organizations: Sequence[str] = (), hosts: Iterable[str] = (),
             usages: Sequence[x509.ObjectIdentifier] = (CLIENT_AUTH,), not_after: dt.datetime | None = None,
             days: int = 365, key_kind: str = "ecdsa") -> KeyPair:
    key = new_key(key_kind)
    now = _now()
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name, organizations))
               .issuer_name(ca.cert.subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(not_after or now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=key_kind == "rsa",
                                            content_commitment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=False, crl_sign=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                              critical=False))
    sans = _sans(hosts)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def kubeconfig(server: str, ca_pem: bytes, user: str, cert: bytes | None = None, key: bytes | None = None,
               token: str | None = None, cluster: str = "cluster", context: str | None = None,
               namespace: str | None = None) -> dict[str, Any]:
    """A kubeconfig (as a dict) with inline data, readable by kubectl and client-go."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    user_entry: dict[str, Any] = {}
    if cert is not None and key is not None:
        user_entry = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    elif token is not None:
        user_entry = {"token": token}
    context = context or f"{user}@{cluster}"
    ctx: dict[str, Any] = {"cluster": cluster, "user": user}
    if namespace:
        ctx["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": context, "context": ctx}],
        "current-context": context,
        "preferences": {},
    }
