"""Host ResourceQuota over VirtualClusters, enforced as kube-apiserver's quota admission enforces it
for its own resources (which it cannot do for ours: the aggregator proxies them past it).

A create, or an update that asks for more (:func:`apiserver.apis.quota.increases`), is checked
against every unscoped ResourceQuota of its host namespace that caps one of the names of
:mod:`apiserver.apis.quota`. Over a limit: 403 with kube's ``exceeded quota`` wording; a quota whose
status does not yet show the limit: 403 ``status unknown for quota``; while the host does not answer,
503, unless the namespace had no quota naming ours when last listed. Admitted, the amounts are
charged to each quota's ``status.used`` through ``/status`` with the quota's resourceVersion as
the precondition, re-read and re-checked on a conflict, so two writers racing for the last unit
cannot both win. A dry run checks and charges nothing. A scale-down asks for nothing and always
passes; what a deleted VirtualCluster held is given back by the reconciler's recount
(:func:`recount`), which also corrects a charge whose write then failed, as kube's quota controller
does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from apiserver.apis import quota
from apiserver.apis.quota import Usage
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.quantity import QuantityError, parse_quantity
from apiserver.registry.admission import AdmissionRequest

log = logging.getLogger(__name__)

CHARGE_ATTEMPTS = 8  # conflicting writers to one quota before the request is refused as busy


def _amounts(values: Any) -> Usage:
    """A ResourceList's amounts for our names (a value that is no quantity counts as absent)."""
    out: Usage = {}
    for name, value in (values or {}).items():
        if name in quota.RESOURCES:
            try:
                out[name] = parse_quantity(str(value))
            except QuantityError:
                continue
    return out


def caps(rq: Obj, asked: Iterable[str]) -> set[str]:
    """Which of ``asked`` this quota caps; none for a scoped quota (scopes select pods, never ours)."""
    spec = rq.get("spec") or {}
    if spec.get("scopes") or spec.get("scopeSelector"):
        return set()
    return set(asked) & set(_amounts(spec.get("hard")))


def check(rq: Obj, asked: Mapping[str, Decimal]) -> tuple[str | None, Usage]:
    """kube's evaluation of one quota: its refusal message, or None and its ``used`` with ``asked`` added."""
    meta, status = rq.get("metadata") or {}, rq.get("status") or {}
    name = meta.get("name", "")
    names = caps(rq, asked)
    hard, used = _amounts(status.get("hard")), _amounts(status.get("used"))
    unknown = sorted(r for r in names if r not in hard)
    if unknown:  # kube's wording; a used that is absent is 0 here: these names are ours to count, not the host's
        return f"status unknown for quota: {name}, resources: {','.join(unknown)}", used
    exceeded = sorted(r for r in names if used.get(r, Decimal(0)) + asked[r] > hard[r])
    if exceeded:
        return (f"exceeded quota: {name}, requested: {quota.listing((r, asked[r]) for r in exceeded)}, "
                f"used: {quota.listing((r, used.get(r, Decimal(0))) for r in exceeded)}, "
                f"limited: {quota.listing((r, hard[r]) for r in exceeded)}"), used
    return None, quota.add(used, {r: asked[r] for r in names})


def _path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/resourcequotas" + (f"/{name}" if name else "")


def _with_used(rq: Obj, used: Usage) -> Obj:
    status = rq.get("status") or {}
    return {**rq, "status": {**status, "used": {**(status.get("used") or {}),
                                                **{k: quota.format_amount(k, v) for k, v in used.items()}}}}


class QuotaAdmission:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        # namespaces last listed with no quota naming ours: while the host does not answer, a write there
        # is admitted (nothing would be charged), so a host outage does not stop every scale-up
        self._uncapped: set[str] = set()

    async def admit(self, request: AdmissionRequest) -> None:
        new = quota.usage(request.obj.get("spec"))
        asked = quota.increases(new, quota.usage(request.old.get("spec")) if request.old is not None else None)
        if not asked:
            return
        namespace = request.namespace
        quotas = [rq for rq in await self._quotas(namespace) if caps(rq, asked)]
        for rq in quotas:  # every quota is checked before any is charged
            refusal, _ = check(rq, asked)
            if refusal:
                raise request.forbidden(refusal)
        if request.dry_run:
            return
        for rq in quotas:
            await self._charge(request, rq, asked)

    async def _charge(self, request: AdmissionRequest, rq: Obj, asked: Mapping[str, Decimal]) -> None:
        """Add ``asked`` to the quota's used, preconditioned on the resourceVersion it was checked at; on a
        conflict the quota is read again and checked again."""
        name = rq["metadata"]["name"]
        for _ in range(CHARGE_ATTEMPTS):
            refusal, used = check(rq, asked)
            if refusal:
                raise request.forbidden(refusal)
            try:
                await self.client.replace(_path(request.namespace, name) + "/status", _with_used(rq, used))
                return
            except HostError as e:
                if e.code != 409:
                    raise errors.internal(f"charging resource quota {name}: {e.message}") from None
            except HostUnavailable:
                raise errors.service_unavailable(f"cannot charge resource quota {name} on the host right "
                                                 f"now") from None
            rq = await self._get(request.namespace, name)
        raise errors.ApiError(409, "Conflict", f'Operation cannot be fulfilled on resourcequotas "{name}": too many '
                                               f'concurrent writers; please retry', name=name, kind="resourcequotas")

    async def _quotas(self, namespace: str) -> list[Obj]:
        try:
            quotas = list((await self.client.get(_path(namespace))).get("items") or [])
        except HostError as e:
            raise errors.internal(f"listing the resource quotas of namespace {namespace}: {e.message}") from None
        except HostUnavailable:
            if namespace in self._uncapped:
                log.warning("the host does not answer; namespace %s had no quota naming VirtualClusters when last "
                            "seen: admitted", namespace)
                return []
            raise errors.service_unavailable(f"cannot read the resource quotas of namespace {namespace} on the "
                                             f"host right now") from None
        if any(caps(rq, quota.RESOURCES) for rq in quotas):
            self._uncapped.discard(namespace)
        else:
            self._uncapped.add(namespace)
        return quotas

    async def _get(self, namespace: str, name: str) -> Obj:
        try:
            return dict(await self.client.get(_path(namespace, name)))
        except (HostError, HostUnavailable) as e:
            raise errors.service_unavailable(f"cannot read resource quota {name} on the host: {e}") from None


async def recount(client: KubeClient, namespace: str, specs: Iterable[Mapping[str, Any] | None]) -> int:
    """Set ``used`` of our names in every quota of ``namespace`` that caps one to what the VirtualClusters
    there (their ``specs``) hold now; the number of quotas written. A quota written meanwhile is left for
    the next recount."""
    total: Usage = dict.fromkeys(quota.RESOURCES, Decimal(0))
    for spec in specs:
        total = quota.add(total, quota.usage(spec))
    written = 0
    for rq in (await client.get(_path(namespace))).get("items") or []:
        names = caps(rq, quota.RESOURCES)
        if not names:
            continue
        used = _amounts((rq.get("status") or {}).get("used"))
        want = {r: total[r] for r in names}
        if all(used.get(r) == v for r, v in want.items()):
            continue
        try:
            await client.replace(_path(namespace, rq["metadata"]["name"]) + "/status", _with_used(rq, want))
            written += 1
        except HostError as e:
            if e.code != 409:
                raise
    return written
