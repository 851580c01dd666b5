"""Admission: aggregated resources get no host admission, so we do it (namespace lifecycle, host quota in
:mod:`.quota`), and the authorization a write needs beyond its verb (restoring another VirtualCluster's
snapshot, promoting host nodes).

Each plugin sees an :class:`AdmissionRequest`, as kube's admission.Attributes: a create (``old`` None) or
an update of the main resource (not ``/status``), after validation and before storage; on an update it
may run again when a concurrent write wins. A refusal is an :class:`~apiserver.machinery.errors.ApiError`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from apiserver.apis import kubeversion
from apiserver.apis.compute import named_nodes
from apiserver.apis.kubeversion import Offered
from apiserver.apis.quota import PROMOTED_NODES, usage
from apiserver.apis.resource import ResourceInfo
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.auth.authn import Attributes, Authorizer, UserInfo, forbidden_message
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.imported import import_ref
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj

ACTIVE_TTL = 5.0


@dataclass(frozen=True)
class AdmissionRequest:
    info: ResourceInfo
    obj: Obj  # the object to be stored (validated, defaulted)
    old: Obj | None  # the stored object an update replaces; None on a create
    user: UserInfo | None  # None: the server's own write
    dry_run: bool = False  # check, but change nothing outside the request (no quota charged)

    @property
    def name(self) -> str:
        return str(self.obj["metadata"].get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    def forbidden(self, message: str) -> errors.ApiError:
        """kube's 403 for a refused write: ``<resource>.<group> "<name>" is forbidden: <message>``."""
        return errors.ApiError(403, "Forbidden", f'{self.info.qualified} "{self.name}" is forbidden: {message}',
                               name=self.name, group=self.info.group, kind=self.info.resource)


class Admission(Protocol):
    async def admit(self, request: AdmissionRequest) -> None: ...


class NamespaceLifecycle:
    """Creating in a missing namespace is 404, in a terminating one 403, as kube answers."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._active: dict[str, float] = {}

    async def admit(self, request: AdmissionRequest) -> None:
        if request.old is not None:
            return
        info, meta = request.info, request.obj["metadata"]
        namespace = meta["namespace"]
        if self._active.get(namespace, 0.0) > time.monotonic():
            return
        try:
            ns = await self.client.get(f"/api/v1/namespaces/{namespace}")
        except HostError as e:
            if e.code == 404:
                raise errors.ApiError(404, "NotFound", f'namespaces "{namespace}" not found', name=namespace,
                                      kind="namespaces") from None
            raise errors.internal(f"checking namespace {namespace}: {e.message}") from None
        except HostUnavailable:
            raise errors.service_unavailable(f"cannot check namespace {namespace} on the host right now") from None
        if ns.get("metadata", {}).get("deletionTimestamp") or ns.get("status", {}).get("phase") == "Terminating":
            message = f"unable to create new content in namespace {namespace} because it is being terminated"
            raise errors.ApiError(
                403, "Forbidden", f'{info.qualified} "{meta.get("name", "")}" is forbidden: {message}',
                name=meta.get("name", ""), group=info.group, kind=info.resource,
                causes=[errors.Cause("NamespaceTerminating", message, "metadata.namespace")])
        self._active[namespace] = time.monotonic() + ACTIVE_TTL


SNAPSHOTS = "snapshots"  # the subresource restoring is authorized as (not served: like kube's signers, a name for RBAC)


def snapshot_attributes(info: ResourceInfo, namespace: str, source: str) -> Attributes:
    """``get`` on ``virtualclusters/snapshots`` of ``source``: what reading its snapshots takes."""
    return Attributes(verb="get", path=f"/apis/{info.group_version}/namespaces/{namespace}/{info.resource}/{source}/"
                                       f"{SNAPSHOTS}", resource_request=True, namespace=namespace, group=info.group,
                      version=info.version, resource=info.resource, subresource=SNAPSHOTS, name=source)


class RestoreAuthorization:
    """A VirtualCluster created with ``spec.restoreFrom`` starts with the tenant data of another one: its
    creator must be allowed ``get`` on that one's ``virtualclusters/snapshots``, asked of the server's
    authorizer (delegated: a SubjectAccessReview against the host, as every request is). Denied: 403, as
    kube words a denial, naming the object being created. Writes of the server itself (no user) pass."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def admit(self, request: AdmissionRequest) -> None:
        obj, user = request.obj, request.user
        source = (obj.get("spec") or {}).get("restoreFrom") if isinstance(obj.get("spec"), dict) else None
        if request.old is not None or user is None or not isinstance(source, dict) \
                or not isinstance(source.get("virtualCluster"), str):
            return
        attrs = snapshot_attributes(request.info, request.namespace, source["virtualCluster"])
        allowed, reason = await self.authorizer.authorize(user, attrs)
        if not allowed:
            raise request.forbidden(forbidden_message(user, attrs, reason))


PROMOTE = "promote"  # the subresource promoting host nodes is authorized as (not served: a name for RBAC)


def promote_attributes(info: ResourceInfo, namespace: str, name: str) -> Attributes:
    """``create`` on ``virtualclusters/promote`` of ``name``: what taking whole host nodes takes (as
    ``create pods/eviction`` is what evicting takes: promotion drains the nodes it takes)."""
    return Attributes(verb="create", path=f"/apis/{info.group_version}/namespaces/{namespace}/{info.resource}/{name}/"
                                          f"{PROMOTE}", resource_request=True, namespace=namespace, group=info.group,
                      version=info.version, resource=info.resource, subresource=PROMOTE, name=name)


class PromoteAuthorization:
    """Promotion cordons and drains whole host nodes, evicting other teams' pods from them: a create that
    promotes any node (by policy, name, nodeInfos or Dedicated resources), and an update that promotes
    more nodes or names a new one, need ``create`` on ``virtualclusters/promote`` of that VirtualCluster,
    asked of the server's authorizer. The aggregated admin and edit roles do not carry it: a platform
    team grants it. A scale-down always passes; writes of the server itself (no user) pass."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def admit(self, request: AdmissionRequest) -> None:
        user = request.user
        if user is None:
            return
        wanted = usage(request.obj.get("spec"))[PROMOTED_NODES]
        had = usage(request.old.get("spec"))[PROMOTED_NODES] if request.old is not None else 0
        named = set(named_nodes(request.obj.get("spec") or {}))
        if wanted <= had and named <= set(named_nodes((request.old or {}).get("spec") or {})):
            return
        attrs = promote_attributes(request.info, request.namespace, request.name)
        allowed, reason = await self.authorizer.authorize(user, attrs)
        if not allowed:
            raise request.forbidden(forbidden_message(user, attrs, reason))


class KubernetesVersionAdmission:
    """``spec.kubernetesVersion`` (:mod:`apiserver.apis.kubeversion`), when a write sets or changes it, refused with
    422: a version the server does not offer, a skipped minor or a minor downgrade of a cluster that runs
    (``status.kubernetesVersion``), and a version older than the kubelet of a node promoted into it (those
    ``status.nodes`` lists, and those the spec names, read from the host). Left unset, a new cluster runs the
    server's newest and keeps running what it runs."""

    def __init__(self, offered: Offered, host: KubeClient | None) -> None:
        self.offered = offered
        self.host = host

    async def admit(self, request: AdmissionRequest) -> None:
        spec, old = request.obj.get("spec"), request.old
        if not isinstance(spec, dict) or import_ref(request.obj) is not None:
            return
        value = spec.get(kubeversion.FIELD_NAME)
        if not value or (old is not None and value == ((old.get("spec") or {}).get(kubeversion.FIELD_NAME))):
            return
        running = VirtualCluster(old).status.raw.get("kubernetesVersion") if old is not None else None
        causes = kubeversion.move_errors(self.offered, value, running if isinstance(running, str) else None)
        target = self.offered.resolve(value)
        if not causes and target is not None:
            causes = kubeversion.kubelet_errors(target, await self._kubelets(request))
        if causes:
            raise errors.invalid(request.info.kind, request.info.group, request.name, causes)

    async def _kubelets(self, request: AdmissionRequest) -> dict[str, str]:
        """Node name to kubelet version, for the host nodes promoted into the cluster or named by its spec."""
        names = set(named_nodes(request.obj.get("spec") or {}))
        if request.old is not None:
            names |= {str(n.get("name")) for n in VirtualCluster(request.old).status.promoted_nodes}
        if not names or self.host is None:
            return {}
        kubelets = {}
        for name in sorted(names):
            try:
                node = await self.host.get(f"/api/v1/nodes/{name}")
            except HostError as e:
                if e.code == 404:
                    continue
                raise errors.internal(f"reading node {name}: {e.message}") from None
            except HostUnavailable:
                raise errors.service_unavailable(f"cannot read node {name} on the host right now") from None
            version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
            if isinstance(version, str):
                kubelets[name] = version
        return kubelets
