"""The agent's wire format, in one place for the agent and the joiner: paths, bodies, validation.

A join request carries key material, so validation never echoes a PEM value back, and it checks what
would otherwise fail only after the kubelet restarted: the credential must chain to the CA it comes
with, match its key, and be the identity the tenant's Node authorizer expects for this very node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import NameOID

from apiserver.machinery import errors
from apiserver.machinery.errors import Cause
from apiserver.machinery.validation import (
    OMIT_VALUE,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    invalid_value,
    required_value,
)
from certs import pki

JOIN = "/v1/join"
LEAVE = "/v1/leave"
STATUS = "/v1/status"

NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
PEM, SPKI = Encoding.PEM, PublicFormat.SubjectPublicKeyInfo


def node_user(node_name: str) -> str:
    return NODE_USER_PREFIX + node_name


@dataclass(frozen=True)
class JoinRequest:
    virtual_cluster: str  # namespace/name
    server: str
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    node_name: str

    def to_json(self) -> dict[str, str]:
        return {"virtualCluster": self.virtual_cluster, "server": self.server, "caPEM": self.ca_pem.decode(),
                "certPEM": self.cert_pem.decode(), "keyPEM": self.key_pem.decode(), "nodeName": self.node_name}


def _strings(body: Any, fields: tuple[str, ...], causes: list[Cause]) -> dict[str, str]:
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    out = {}
    for name in fields:
        value = body.get(name)
        if value is None or value == "":
            causes.append(required_value(name))
        elif not isinstance(value, str):
            causes.append(invalid_value(name, OMIT_VALUE, "must be a string"))
        else:
            out[name] = value
    return out


def _virtual_cluster_causes(value: str) -> list[Cause]:
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name or dns1123_label_errors(namespace) or dns1123_label_errors(name):
        return [invalid_value("virtualCluster", value, "must be <namespace>/<name> of a VirtualCluster")]
    return []


def _reject(causes: list[Cause]) -> errors.ApiError:
    parts = [f"{c.field}: {c.message}" for c in causes]
    return errors.bad_request("invalid request: " + "; ".join(parts), causes)


def parse_leave(body: Any) -> str:
    causes: list[Cause] = []
    fields = _strings(body, ("virtualCluster",), causes)
    if "virtualCluster" in fields:
        causes += _virtual_cluster_causes(fields["virtualCluster"])
    if causes:
        raise _reject(causes)
    return fields["virtualCluster"]


def _credential_causes(ca_pem: bytes, cert_pem: bytes, key_pem: bytes, node_name: str) -> list[Cause]:
    """The credential is checked the way the tenant apiserver will check it, before anything changes."""
    try:
        ca = pki.load_cert(ca_pem)
    except ValueError:
        return [invalid_value("caPEM", OMIT_VALUE, "not a PEM certificate")]
    try:
        cert = pki.load_cert(cert_pem)
    except ValueError:
        return [invalid_value("certPEM", OMIT_VALUE, "not a PEM certificate")]
    try:
        key = pki.load_key(key_pem)
    except (ValueError, TypeError, AssertionError):
        return [invalid_value("keyPEM", OMIT_VALUE, "not an unencrypted PEM private key")]
    causes = []
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        causes.append(invalid_value("certPEM", OMIT_VALUE, "not signed by caPEM"))
    if pki.public_key_pem(key) != cert.public_key().public_bytes(PEM, SPKI):
        causes.append(invalid_value("keyPEM", OMIT_VALUE, "does not match certPEM"))
    cn = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if cn != [node_user(node_name)] or NODES_GROUP not in orgs:
        causes.append(invalid_value("certPEM", OMIT_VALUE,
                                    f"the subject must be CN={node_user(node_name)}, O={NODES_GROUP}"))
    return causes


def parse_join(body: Any, own_node: str) -> JoinRequest:
    """A join request for the node this agent runs on, or a 400 Status naming every problem."""
    causes: list[Cause] = []
    fields = _strings(body, ("virtualCluster", "server", "caPEM", "certPEM", "keyPEM", "nodeName"), causes)
    if "virtualCluster" in fields:
        causes += _virtual_cluster_causes(fields["virtualCluster"])
    if "server" in fields:
        url = urlsplit(fields["server"])
        if url.scheme != "https" or not url.hostname or url.path not in ("", "/") or url.query:
            causes.append(invalid_value("server", fields["server"], "must be https://host[:port]"))
    node_name = fields.get("nodeName")
    if node_name is not None:
        if dns1123_subdomain_errors(node_name):
            causes.append(invalid_value("nodeName", node_name, "must be a node name"))
        elif node_name != own_node:
            causes.append(invalid_value("nodeName", node_name, f"this agent runs on node {own_node}"))
        elif {"caPEM", "certPEM", "keyPEM"} <= fields.keys():
            causes += _credential_causes(*(fields[k].encode() for k in ("caPEM", "certPEM", "keyPEM")), node_name)
    if causes:
        raise _reject(causes)
    return JoinRequest(fields["virtualCluster"], fields["server"].rstrip("/"), fields["caPEM"].encode(),
                       fields["certPEM"].encode(), fields["keyPEM"].encode(), fields["nodeName"])
