"""Names and markers of everything a slice puts in the host and the tenant, derived from the objects
themselves so that a restart finds what it made."""

from __future__ import annotations

import hashlib

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.jsonutil import Obj

NODE_NAME = "kosmos-shared-0"  # the -0 leaves room to split a slice over several nodes later
DOMAIN = "vc.kosmos.io"
MANAGED_BY = f"{DOMAIN}/managed-by"
MANAGER = "shared-syncer"
VC_UID = f"{DOMAIN}/vc-uid"
SHARED_NODE = f"{DOMAIN}/shared-node"
TENANT_NAMESPACE = f"{DOMAIN}/tenant-namespace"
TENANT_NAME = f"{DOMAIN}/tenant-name"
TENANT_UID = f"{DOMAIN}/tenant-uid"
TENANT_KIND = f"{DOMAIN}/tenant-kind"
TENANT_LABELS = f"{DOMAIN}/tenant-labels"
TENANT_ANNOTATIONS = f"{DOMAIN}/tenant-annotations"
SPEC_HASH = f"{DOMAIN}/spec-hash"
# a host pod's annotation: the tenant pod's generation it was last brought to (what it may change, it has);
# each tenant generation is carried once, so a host that rewrites what it is given is never fought
GENERATION = f"{DOMAIN}/tenant-generation"
TOKEN_OF = f"{DOMAIN}/token-of"  # a token Secret's label: the uid of the tenant pod the tokens are bound to
REFRESH_AT = f"{DOMAIN}/refresh-at"  # a token Secret's annotation: when its tokens are asked for again
HOST_SCHEDULED = f"{DOMAIN}/HostScheduled"  # the tenant pod's condition: its host pod was placed
QUOTA = "shared-slice"
LIMIT_RANGE = "shared-slice-defaults"
MAX_NAME = 63


def safe_concat(*parts: str, limit: int = MAX_NAME) -> str:
    """Parts joined by '-': verbatim when that fits ``limit``, else a prefix and ten hex of its hash,
    so two long names never collide and the result stays a valid DNS label."""
    joined = "-".join(p for p in parts if p)
    if len(joined) <= limit:
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:10]
    return joined[: limit - 11].rstrip("-.") + "-" + digest


def host_namespace(vc: Obj) -> str:
    """The slice's host namespace: the VirtualCluster's namespace and name, and six hex of its uid, so a
    VirtualCluster created again never lands in its predecessor's namespace while it terminates."""
    meta = VirtualCluster(vc).meta
    h6 = hashlib.sha256(meta.uid.encode()).hexdigest()[:6]
    return safe_concat("vcw", meta.namespace, meta.name, h6)


def host_name(namespace: str, name: str) -> str:
    """A tenant object's name in the slice's namespace: the name, 'x', its tenant namespace (a tenant
    name cannot contain '-x-' ambiguously enough to collide: the hash settles any long one)."""
    return safe_concat(name, "x", namespace)


def markers(vc: Obj) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, VC_UID: VirtualCluster(vc).meta.uid}


def identity(obj: Obj, kind: str) -> dict[str, str]:
    meta = obj["metadata"]
    return {TENANT_NAMESPACE: meta.get("namespace", ""), TENANT_NAME: meta["name"],
            TENANT_UID: meta.get("uid", ""), TENANT_KIND: kind}


def owned_by(host: Obj, vc_uid: str) -> bool:
    """Whether a host object is this slice's: our markers, and a name that is the mapping of the tenant
    identity it carries (an object someone else wrote at our name is not ours)."""
    meta = host.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    if labels.get(MANAGED_BY) != MANAGER or labels.get(VC_UID) != vc_uid:
        return False
    return meta.get("name") == host_name(notes.get(TENANT_NAMESPACE, ""), notes.get(TENANT_NAME, ""))


