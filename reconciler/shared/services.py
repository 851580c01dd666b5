"""A slice's tenant Services, carried by the host's proxies: a host Service at each tenant ClusterIP, and
host EndpointSlices with the tenant's endpoints.
"""

from __future__ import annotations

from collections.abc import Awaitable

from apiserver.kubeclient.client import HostError
from apiserver.machinery.jsonutil import Obj
from reconciler.shared import names, translate
from reconciler.shared.context import ENDPOINTSLICE_PATH, SERVICE_PATH, SliceContext
from reconciler.shared.ranges import ServiceRanges


class Services(SliceContext):
    """Host Services and EndpointSlices for the tenant's."""

    async def _services(self, services: list[Obj]) -> None:
        """Each tenant Service with a ClusterIP has a host Service at the same address, and each of its
        EndpointSlices a host one with the same endpoints: the host's proxies carry the tenant's traffic.
        What no tenant object asks for any more goes; what the host refuses is told on the tenant Service."""
        await ServiceRanges(self.host).ensure(self.vc, self.network.service_cidr)
        selector = f"{names.VC_UID}={self.uid}"
        have = {s["metadata"]["name"]: s for s in (await self.host.get(SERVICE_PATH.format(self.namespace),
                                                                      labelSelector=selector))["items"]}
        served: dict[tuple[str, str], str] = {}
        steps: list[Awaitable[None]] = []
        for svc in services:
            want = translate.host_service(self.vc, svc)
            if want is None:
                continue
            meta = svc["metadata"]
            served[(meta["namespace"], meta["name"])] = want["metadata"]["name"]
            steps.append(self._service(svc, want, have.get(want["metadata"]["name"])))
        for name, obj in have.items():
            if name not in served.values() and names.owned_by(obj, self.uid):
                steps.append(self._delete(SERVICE_PATH.format(self.namespace), name))
        await self._all(steps)
        slices = (await self.tenant.get("/apis/discovery.k8s.io/v1/endpointslices"))["items"]
        have_slices = {s["metadata"]["name"]: s for s in (await self.host.get(
            ENDPOINTSLICE_PATH.format(self.namespace), labelSelector=selector))["items"]}
        wanted: set[str] = set()
        steps = []
        api = served.get(("default", "kubernetes"))
        if api is not None and self.api_addresses:  # not the address nodes use: one a pod reaches directly
            slices = [translate.apiserver_endpointslice(self.api_addresses),
                      *(s for s in slices if (s["metadata"]["namespace"], s["metadata"]["name"]) != ("default", "kubernetes"))]
        for es in slices:
            meta = es["metadata"]
            service = served.get((meta["namespace"], (meta.get("labels") or {}).get("kubernetes.io/service-name", "")))
            if service is None:
                continue
            want = translate.host_endpointslice(self.vc, es, service)
            wanted.add(want["metadata"]["name"])
            steps.append(self._endpointslice(want, have_slices.get(want["metadata"]["name"])))
        for name, obj in have_slices.items():
            if name not in wanted and names.owned_by(obj, self.uid):
                steps.append(self._delete(ENDPOINTSLICE_PATH.format(self.namespace), name))
        await self._all(steps)

    async def _service(self, svc: Obj, want: Obj, have: Obj | None) -> None:
        path = SERVICE_PATH.format(self.namespace)
        name = want["metadata"]["name"]
        try:
            if have is not None:
                change = translate.service_differs(have, want)
                if not change:
                    return
                if change == "update":
                    await self.host.request("PUT", f"{path}/{name}", body={
                        **want, "metadata": {**want["metadata"], "resourceVersion": have["metadata"]["resourceVersion"]}})
                    return
                await self._delete(path, name)
            await self.host.create(path, want)
        except HostError as e:
            if e.code == 409:
                self._wake.set()  # made or changed meanwhile: look again
                return
            self._again = True
            await self._tell_once(svc, "HostServiceRefused",
                                  f"the host cannot carry this Service from the shared slice: {e.message}", kind="Service")

    async def _endpointslice(self, want: Obj, have: Obj | None) -> None:
        path = ENDPOINTSLICE_PATH.format(self.namespace)
        if have is None:
            await self.host.create(path, want)
        elif translate.endpointslice_differs(have, want):
            want["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
            await self.host.request("PUT", f"{path}/{want['metadata']['name']}", body=want)
