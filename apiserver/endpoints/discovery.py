"""Discovery documents: aggregated (apidiscovery.k8s.io/v2) and legacy, built once."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
from aiohttp import web

from apiserver.apis.resource import ResourceInfo
from apiserver.endpoints.negotiation import render

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def wants_aggregated(accept: str | None) -> str | None:
    """The discovery version a client asks for (``v2`` or ``v2beta1``), or None for legacy."""
    if not accept:
        return None
    for part in accept.split(","):
        params = dict(
            (k.strip().lower(), v.strip()) for k, _, v in (p.partition("=") for p in part.split(";")[1:]))
        if params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            if params.get("v") in ("v2", "v2beta1"):
                return params["v"]
    return None


def _response_kind(info: ResourceInfo, kind: str) -> dict[str, str]:
    return {"group": info.group, "version": info.version, "kind": kind}


def aggregated(resources: list[ResourceInfo], version: str = "v2") -> dict[str, Any]:
    groups: dict[str, list[ResourceInfo]] = {}
    for info in resources:
        groups.setdefault(info.group, []).append(info)
    items = []
    for group, infos in groups.items():
        items.append({
            "metadata": {"name": group, "creationTimestamp": None},
            "versions": [{
                "version": infos[0].version,
                "freshness": "Current",
                "resources": [{
                    "resource": info.resource,
                    "responseKind": _response_kind(info, info.kind),
                    "scope": "Namespaced" if info.namespaced else "Cluster",
                    "singularResource": info.singular,
                    "verbs": sorted(info.verbs),
                    "shortNames": list(info.short_names),
                    "categories": list(info.categories),
                    "subresources": [
                        {"subresource": sub,
                         "responseKind": _response_kind(info, info.kind if sub == "status" else "Config"),
                         "verbs": sorted(verbs)}
                        for sub, verbs in info.subresources.items()
                    ],
                } for info in infos],
            }],
        })
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{version}",
            "metadata": {}, "items": items}


def resource_list(resources: list[ResourceInfo], group_version: str) -> dict[str, Any]:
    out = []
    for info in resources:
        out.append({
            "name": info.resource, "singularName": info.singular, "namespaced": info.namespaced,
            "kind": info.kind, "verbs": sorted(info.verbs), "shortNames": list(info.short_names),
            "categories": list(info.categories), "storageVersionHash": _storage_hash(info),
        })
        for sub, verbs in info.subresources.items():
            out.append({"name": f"{info.resource}/{sub}", "singularName": "", "namespaced": info.namespaced,
                        "kind": info.kind if sub == "status" else "Config", "verbs": sorted(verbs)})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


def api_group(group: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list(group: str, version: str) -> dict[str, Any]:
    entry = api_group(group, version)
    entry.pop("kind")
    entry.pop("apiVersion")
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [entry]}


def etag(document: dict[str, Any]) -> str:
    return '"' + hashlib.sha512(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest() + '"'


def _storage_hash(info: ResourceInfo) -> str:
    """kube publishes a short stable hash of the storage version; same idea here."""
    digest = hashlib.sha256(f"{info.group}/{info.version}/{info.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def routes(resources: list[ResourceInfo]) -> list[web.RouteDef]:
    """``/apis`` (aggregated v2 with ETag, or the APIGroupList), the group, and the group-version."""
    docs = {v: aggregated(resources, v) for v in ("v2", "v2beta1")}
    etags = {v: etag(d) for v, d in docs.items()}
    info = resources[0]
    gv_path = f"/apis/{info.group_version}"
    legacy = resource_list(resources, info.group_version)

    async def apis(request: web.Request) -> web.Response:
        version = wants_aggregated(request.headers.get("Accept"))
        if version is None:
            return render(api_group_list(info.group, info.version))
        headers = {"ETag": etags[version], "Vary": "Accept"}
        if request.headers.get("If-None-Match") == etags[version]:
            return web.Response(status=304, headers=headers)
        resp = render(docs[version], headers=headers)
        resp.headers["Content-Type"] = \
            f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
        return resp

    async def group(request: web.Request) -> web.Response:
        return render(api_group(info.group, info.version))

    async def group_version(request: web.Request) -> web.Response:
        return render(legacy)

    return [web.get("/apis", apis), web.get("/apis/", apis), web.get(f"/apis/{info.group}", group),
            web.get(gv_path, group_version), web.get(gv_path + "/", group_version)]
