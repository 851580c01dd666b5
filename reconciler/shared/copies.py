"""A slice's pods' ConfigMaps and Secrets, copied into the slice's host namespace under host names, and their
service-account tokens, asked of the tenant and kept in a host Secret each pod mounts.
"""

from __future__ import annotations

import contextlib
import datetime as dt

from apiserver.kubeclient.client import HostError
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import parse_rfc3339, rfc3339
from reconciler.shared import names, translate
from reconciler.shared.context import CLAIM_PATH, Missing, SliceContext, ignore_missing

TOKEN_REFRESH = 0.8  # of a token's life, when it is asked for again (a kubelet's rule)


class Copies(SliceContext):
    """What a pod references, in the host before its host pod is made and kept current while it runs."""

    async def _copy_references(self, pod: Obj) -> None:
        refs = translate.references(pod, self.network)
        ns = pod["metadata"]["namespace"]
        for claim in translate.claim_names(pod) if self.storage_classes else []:
            try:
                held = await self.host.get(f"{CLAIM_PATH.format(self.namespace)}/{names.host_name(ns, claim)}")
            except HostError as e:
                if e.code != 404:
                    raise
                held = None
            if held is None or not names.owned_by(held, self.uid):
                raise Missing(f"PersistentVolumeClaim {ns}/{claim} is not served by the shared slice: it must exist "
                               f"and be of a StorageClass the slice offers ({', '.join(self.storage_classes)})")
        for kind, wanted in (("ConfigMap", refs.configmaps), ("Secret", refs.secrets)):
            plural = "configmaps" if kind == "ConfigMap" else "secrets"
            for name, optional in wanted.items():
                try:
                    obj = await self.tenant.get(f"/api/v1/namespaces/{ns}/{plural}/{name}")
                except HostError as e:
                    if e.code == 404 and optional:  # gone from the tenant: gone from the pod's volume too
                        await self._drop_copy(plural, names.host_name(ns, name))
                        continue
                    if e.code == 404:
                        raise Missing(f"{kind} {ns}/{name} does not exist in the tenant") from None
                    raise
                await self._put_copy(translate.host_copy(self.vc, obj, kind), plural)

    async def _drop_copy(self, plural: str, name: str) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/{plural}/{name}"
        try:
            have = await self.host.get(path)
        except HostError as e:
            if e.code != 404:
                raise
            return
        if names.owned_by(have, self.uid):
            with contextlib.suppress(HostError):
                await self.host.delete(path)

    async def _put_copy(self, want: Obj, plural: str) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/{plural}"
        try:
            have = await self.host.get(f"{path}/{want['metadata']['name']}")
        except HostError as e:
            if e.code != 404:
                raise
            with contextlib.suppress(HostError):
                await self.host.create(path, want)
            return
        if not names.owned_by(have, self.uid):
            raise Missing(f"a host {want['kind']} {self.namespace}/{want['metadata']['name']} that this slice "
                           f"did not create is in the way")
        if not translate.same_content(have, want):
            await self.host.request("PUT", f"{path}/{want['metadata']['name']}",
                                    body={**want, "metadata": {**want["metadata"],
                                                               "resourceVersion": have["metadata"]["resourceVersion"]}})

    async def _collect_copies(self, tenant_pods: list[Obj]) -> None:
        """Copies refreshed for the live pods that use them; the unused ones removed."""
        live = [p for p in tenant_pods if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        used: dict[str, set[str]] = {"configmaps": set(), "secrets": set()}
        for pod in live:
            refs = translate.references(pod, self.network)
            ns = pod["metadata"]["namespace"]
            used["configmaps"] |= {names.host_name(ns, n) for n in refs.configmaps}
            used["secrets"] |= {names.host_name(ns, n) for n in refs.secrets}
            if self.network.routed and translate.token_asks(pod):
                used["secrets"].add(translate.token_secret_name(pod))
        listed: dict[str, Obj] = {}
        for plural, keep in used.items():
            copies = (await self.host.get(f"/api/v1/namespaces/{self.namespace}/{plural}",
                                          labelSelector=f"{names.VC_UID}={self.uid}"))["items"]
            if plural == "secrets":
                listed = {c["metadata"]["name"]: c for c in copies}
            for c in copies:
                if c["metadata"]["name"] not in keep and names.owned_by(c, self.uid):
                    with contextlib.suppress(HostError):
                        await self.host.delete(f"/api/v1/namespaces/{self.namespace}/{plural}/{c['metadata']['name']}")
        refresh = [self._copy_references(p) for p in live if translate.started(p)]
        if self.network.routed:
            refresh += [self._tokens(p, listed.get(translate.token_secret_name(p))) for p in live
                        if translate.started(p) and translate.token_asks(p)]
        await self._all([ignore_missing(r) for r in refresh])

    async def _tokens(self, pod: Obj, have: Obj | None = None) -> None:
        """The pod's tokens, asked of the tenant (TokenRequest for its ServiceAccount, bound to the tenant pod,
        with each source's audience and expiry), in the host Secret its host pod mounts (``have``, when the
        pass listed it already); asked again once the first reaches 80% of its life. A tenant that refuses
        (a missing ServiceAccount) holds the pod back."""
        asks = translate.token_asks(pod) if self.network.routed else []
        if not asks:
            return
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{translate.token_secret_name(pod)}"
        if have is None:
            try:
                have = await self.host.get(path)
            except HostError as e:
                if e.code != 404:
                    raise
        if have is not None:
            if not names.owned_by(have, self.uid):
                raise Missing(f"a host Secret {self.namespace}/{have['metadata']['name']} that this slice did not "
                               f"create is in the way of the pod's service-account token")
            due = (have["metadata"].get("annotations") or {}).get(names.REFRESH_AT, "")
            if translate.tokens_current(have, pod) and due and parse_rfc3339(due) > dt.datetime.now(dt.UTC):
                return
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        tokens: dict[str, str] = {}
        refresh: dt.datetime | None = None
        for ask in asks:
            issued = dt.datetime.now(dt.UTC)
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": [ask.audience] if ask.audience else [], "expirationSeconds": ask.expiration,
                             "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                "uid": meta["uid"]}}}
            try:
                answer = await self.tenant.create(
                    f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", body)
            except HostError as e:
                if e.code in (403, 404, 422):
                    raise Missing(f"the tenant issued no token for ServiceAccount {meta['namespace']}/{account}: "
                                   f"{e.message}") from None
                raise
            tokens[ask.key] = answer["status"]["token"]
            expires = parse_rfc3339(answer["status"]["expirationTimestamp"])
            due_at = issued + (expires - issued) * TOKEN_REFRESH
            refresh = due_at if refresh is None else min(refresh, due_at)
        assert refresh is not None
        want = translate.token_secret(self.vc, pod, tokens, rfc3339(refresh))
        if have is None:
            await self.host.create(f"/api/v1/namespaces/{self.namespace}/secrets", want)
        else:
            want["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
            await self.host.request("PUT", path, body=want)
