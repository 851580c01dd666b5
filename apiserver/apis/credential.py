"""The VirtualClusterCredential: one credential the ``kubeconfig`` subresource issued, as an object.

Who it was issued to (the host user, their uid and groups), for which VirtualCluster, until when, and
when the tenant last saw it used. Deleting it revokes it: the tenant apiserver asks this server about
every request made with it (``apiserver.endpoints.tenantauthz``) and is told to refuse it once the
object is gone. The object's name is the credential's id, carried in the client certificate as the
group ``kosmos:credential:<name>``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from apiserver.apis.resource import VIRTUALCLUSTERCREDENTIALS as INFO
from apiserver.apis.schema import DEFINITION_PREFIX, ListMetaSchema, ObjectMetaSchema
from apiserver.machinery.errors import Cause
from apiserver.machinery.fields import Array, KubeSchema, Map, Obj, Str, Time, prune, validate_with

__all__ = ["CLUSTER_LABEL", "ISSUER_LABEL", "OWNER_LABEL", "owner_label_value", "CredentialSchema", "CredentialSpecSchema", "new_credential", "prune_unknown_fields",
           "validate_spec", "validate_status"]

CLUSTER_LABEL = "kosmos.io/virtualcluster"  # the VirtualCluster a credential opens, for label selectors
OWNER_LABEL = "kosmos.io/issued-to"  # a digest of the user it was issued to: a user's own, by label selector
# which client CA signed it (certs.tenant.TenantPki.issuer): a rotation's end deletes what the old one signed
ISSUER_LABEL = "kosmos.io/issuer"


def owner_label_value(user: str) -> str:
    """The OWNER_LABEL value of ``user``'s credentials (user names may hold what label values cannot)."""
    return hashlib.sha256(user.encode()).hexdigest()[:40]


class CredentialSpecSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialSpec"
    DESCRIPTION = "What was issued, to whom, and until when; written once, by the kubeconfig subresource."

    virtualCluster = Str("Name of the VirtualCluster, in this namespace, the credential opens.", required=True)
    user = Str("The host user the credential was issued to (its client certificate's common name).",
               required=True)
    uid = Str("The host user's uid when it was issued.")
    groups = Array(Str(), "The host user's groups when it was issued (what its host access is checked with).")
    extra = Map(Array(Str()), "The host user's extra attributes when it was issued.")
    expirationTimestamp = Time("When the credential expires.", required=True)


class CredentialStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialStatus"
    DESCRIPTION = "What the tenant has seen of the credential."

    lastUsedTime = Time("When the tenant apiserver last served a request made with the credential (updated at "
                        "most once a minute).")


class CredentialSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredential"
    DESCRIPTION = ("A credential for a tenant cluster issued by the kubeconfig subresource; delete it to revoke "
                   "the credential.")
    GVK = ({"group": INFO.group, "kind": INFO.kind, "version": INFO.version},)

    apiVersion = Str("APIVersion defines the versioned schema of this representation of an object.")
    kind = Str("Kind is a string value representing the REST resource this object represents.")
    metadata = Obj(ObjectMetaSchema, "Standard object's metadata.")
    spec = Obj(CredentialSpecSchema, "What was issued, to whom, and until when.")
    status = Obj(CredentialStatusSchema, "What the tenant has seen of the credential.")


class CredentialListSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialList"
    DESCRIPTION = "A list of VirtualClusterCredentials."
    GVK = ({"group": INFO.group, "kind": INFO.list_kind, "version": INFO.version},)

    apiVersion = Str("APIVersion defines the versioned schema of this representation of an object.")
    kind = Str("Kind is a string value representing the REST resource this object represents.")
    metadata = Obj(ListMetaSchema, "Standard list metadata.")
    items = Array(Obj(CredentialSchema), "The VirtualClusterCredentials.", required=True)


_SPEC = CredentialSpecSchema()
_STATUS = CredentialStatusSchema()
_OBJECT = CredentialSchema()


def validate_spec(spec: Any) -> list[Cause]:
    return validate_with(_SPEC, spec, "spec")


def validate_status(status: Any) -> list[Cause]:
    return validate_with(_STATUS, status, "status")


def prune_unknown_fields(obj: dict[str, Any]) -> list[str]:
    return prune(_OBJECT, obj)


def new_credential(namespace: str, cluster: str, user: str, uid: str, groups: list[str],
                   extra: dict[str, list[str]], expires: str, issuer: str = "") -> dict[str, Any]:
    """The object the subresource creates for one issuance (its name is generated from the cluster's);
    ``issuer`` names the CA that signs it, where one of ours does."""
    labels = {CLUSTER_LABEL: cluster, OWNER_LABEL: owner_label_value(user), **({ISSUER_LABEL: issuer} if issuer else {})}
    return {"apiVersion": INFO.group_version, "kind": INFO.kind,
            "metadata": {"generateName": f"{cluster}-", "namespace": namespace, "labels": labels},
            "spec": {"virtualCluster": cluster, "user": user, "uid": uid, "groups": groups, "extra": extra,
                     "expirationTimestamp": expires}}
