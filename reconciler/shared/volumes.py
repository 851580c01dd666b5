"""A slice's storage: the host StorageClasses it offers, as the tenant's, and each tenant claim of one served
by a host claim in the slice's namespace.
"""

from __future__ import annotations

import contextlib

from apiserver.kubeclient.client import HostError
from reconciler.shared import names, translate
from reconciler.shared.context import CLAIM_PATH, CLASSES, SliceContext


class Volumes(SliceContext):
    """The tenant's classes, claims and volumes, and their host claims."""

    async def _volumes(self) -> None:
        """The offered host StorageClasses as the tenant's (the host's default, if offered, its default); each
        tenant claim of one a host claim in the slice's namespace and a tenant volume bound to it; what no
        claim needs any more goes, the host claim with its data."""
        offered = sorted((c for c in (await self.host.get(CLASSES))["items"]
                          if c["metadata"]["name"] in self.storage_classes), key=lambda c: c["metadata"]["name"])
        default = next((c["metadata"]["name"] for c in offered
                        if (c["metadata"].get("annotations") or {}).get(translate.DEFAULT_CLASS) == "true"),
                       offered[0]["metadata"]["name"] if offered else "")
        have = {c["metadata"]["name"]: c for c in (await self.tenant.get(
            CLASSES, labelSelector=f"{names.MANAGED_BY}={names.MANAGER}"))["items"]}
        for host_class in offered:
            want = translate.tenant_storage_class(host_class, host_class["metadata"]["name"] == default)
            current = have.pop(want["metadata"]["name"], None)
            if current is not None and translate.storage_class_differs(current, want):
                await self.tenant.delete(f"{CLASSES}/{want['metadata']['name']}")  # its fields are immutable
                current = None
            if current is None:
                with contextlib.suppress(HostError):  # a tenant class of that name, not ours: left alone
                    await self.tenant.create(CLASSES, want)
        for gone in have:
            await self.tenant.delete(f"{CLASSES}/{gone}")
        await self._csi_driver()
        served = {c["metadata"]["name"] for c in offered}
        claims = [c for c in (await self.tenant.get("/api/v1/persistentvolumeclaims"))["items"]
                  if (c.get("spec") or {}).get("storageClassName") in served]
        held = {c["metadata"]["name"]: c for c in (await self.host.get(
            CLAIM_PATH.format(self.namespace), labelSelector=f"{names.VC_UID}={self.uid}"))["items"]}
        live = set()
        for claim in claims:
            want = translate.host_claim(self.vc, claim)
            live.add(claim["metadata"]["uid"])
            if want["metadata"]["name"] not in held:
                try:
                    await self.host.create(CLAIM_PATH.format(self.namespace), want)
                except HostError as e:
                    if e.code != 409:
                        await self._tenant_event(claim, "Warning", "ProvisioningFailed",
                                                 f"the host refused the claim's host claim: {e.message}",
                                                 kind="PersistentVolumeClaim")
                        continue
            if not (claim.get("spec") or {}).get("volumeName") and not claim["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(HostError):  # 409: made by an earlier pass
                    await self.tenant.create("/api/v1/persistentvolumes", translate.tenant_volume(self.vc, claim))
        wanted = {names.host_name(c["metadata"]["namespace"], c["metadata"]["name"]) for c in claims}
        for name, claim in held.items():
            if name not in wanted and names.owned_by(claim, self.uid):
                await self._delete(CLAIM_PATH.format(self.namespace), name)
        for volume in (await self.tenant.get("/api/v1/persistentvolumes",
                                             labelSelector=f"{names.MANAGED_BY}={names.MANAGER}"))["items"]:
            if ((volume.get("spec") or {}).get("claimRef") or {}).get("uid") not in live:
                with contextlib.suppress(HostError):
                    await self.tenant.delete(f"/api/v1/persistentvolumes/{volume['metadata']['name']}")

    async def _csi_driver(self) -> None:
        """The tenant's volumes name the slice as their driver, which needs no attaching: the tenant's
        attach/detach controller leaves them alone."""
        if self._driver_made:
            return
        driver = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                  "metadata": {"name": translate.PROVISIONER, "labels": {names.MANAGED_BY: names.MANAGER}},
                  "spec": {"attachRequired": False, "podInfoOnMount": False}}
        try:
            await self.tenant.create("/apis/storage.k8s.io/v1/csidrivers", driver)
        except HostError as e:
            if e.code != 409:
                raise
        self._driver_made = True
