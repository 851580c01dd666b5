"""The one rule of whether an issued credential's holder still has access: the host must still let the
user it was issued to ``get virtualclusters/kubeconfig`` of its cluster (asked as that user, with the uid,
groups and extra recorded at issuance). Used by the tenants' authorization webhook and by the sweep that
revokes imported clusters' credentials."""

from __future__ import annotations

import logging

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.auth.authn import Attributes, Authorizer, UserInfo
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj

__all__ = ["access_lost"]

log = logging.getLogger(__name__)


async def access_lost(authorizer: Authorizer, namespace: str, cluster: str, spec: Obj) -> str:
    """Why the holder of the credential with ``spec`` has lost access to ``namespace/cluster`` ("" while they
    have it, and when the host cannot say: an outage revokes nothing)."""
    user = UserInfo(str(spec.get("user", "")), tuple(spec.get("groups") or ()), str(spec.get("uid") or ""),
                    {k: tuple(v) for k, v in (spec.get("extra") or {}).items()})
    attrs = Attributes(verb="get", path="", resource_request=True, namespace=namespace,
                       group=VIRTUALCLUSTERS.group, version=VIRTUALCLUSTERS.version,
                       resource=VIRTUALCLUSTERS.resource, subresource="kubeconfig", name=cluster)
    try:
        allowed, _ = await authorizer.authorize(user, attrs)
    except errors.ApiError as e:
        log.warning("cannot check the host access of %s to %s/%s: %s", user.name, namespace, cluster, e.message)
        return ""
    if allowed:
        return ""
    return (f"{user.name} may no longer get virtualclusters/kubeconfig of {namespace}/{cluster} on the host: the "
            f"credentials issued to them are refused")
