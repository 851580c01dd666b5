"""The load generator's HTTP side: one keep-alive aiohttp session per target, JSON in and out.

Every request is timed from just before it is sent to the last byte of the body, which the
client reads but does not decode unless it needs a value from it: decoding a 10,000-item list
would add the same client time to both servers and hide the difference between them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from apiserver.apis.resource import VIRTUALCLUSTERS as VC

from .servers import Target

GV = f"/apis/{VC.group}/{VC.version}"
JSON_HEADERS = {"Accept": "application/json", "Content-Type": "application/json"}
MERGE_PATCH = {"Accept": "application/json", "Content-Type": "application/merge-patch+json"}
SHARD_LABEL = "bench.kosmos.io/shard"
SHARDS = 100  # a selector on one shard matches 1% of the population


_CONTINUE = re.compile(rb'"continue":"([^"]+)"')


class RequestFailed(RuntimeError):
    pass


def collection(namespace: str | None = None, gv: str = GV) -> str:
    return f"{gv}/namespaces/{namespace}/{VC.resource}" if namespace else f"{gv}/{VC.resource}"


def item(namespace: str, name: str, subresource: str = "", gv: str = GV) -> str:
    return f"{collection(namespace, gv)}/{name}" + (f"/{subresource}" if subresource else "")


def namespace_name(index: int) -> str:
    return f"bench-{index:02d}"


def object_name(ns_index: int, index: int) -> str:
    return f"vc-{ns_index:02d}-{index:05d}"


def virtualcluster(namespace: str, name: str, index: int) -> dict[str, Any]:
    """A realistic VirtualCluster (~700 bytes): labels, a promote policy, resources, a control-plane shape."""
    return {
        "apiVersion": VC.group_version, "kind": VC.kind,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {SHARD_LABEL: f"s{index % SHARDS:02d}", "app.kubernetes.io/part-of": "bench",
                                "team": f"team-{index % 7}"},
                     "annotations": {"bench.kosmos.io/owner": f"owner-{index}@example.com"}},
        "spec": {
            "externalIP": f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}",
            "promotePolicies": [{"labelSelector": {"matchLabels": {"kubernetes.io/os": "linux",
                                                                   "topology.kubernetes.io/zone": "zone-a"}},
                                 "nodeCount": 1 + index % 3}],
            "promoteResources": {"resources": {"cpu": "8", "memory": "32Gi"}},
            "kubeInKubeConfig": {"apiServerReplicas": 1, "apiServerServiceType": "hostNetwork",
                                 "clusterCIDR": "10.244.0.0/16", "etcdUnitSize": "1Gi"},
        },
    }


def ready_status(obj: dict[str, Any], now: str) -> dict[str, Any]:
    """What the reconciler writes once a cluster is up: phase, three conditions, endpoint, nodes."""
    generation = obj["metadata"].get("generation", 1)
    name = obj["metadata"]["name"]
    conditions = [{"type": t, "status": "True", "reason": "Ready", "message": f"{t} since {now}",
                   "lastTransitionTime": now, "observedGeneration": generation}
                  for t in ("ControlPlaneReady", "NodesReady", "Ready")]
    return {"phase": "Completed", "reason": "Ready", "message": "the control plane and its nodes are ready",
            "updateTime": now, "observedGeneration": generation, "conditions": conditions,
            "controlPlaneEndpoint": f"https://{obj['spec'].get('externalIP') or '127.0.0.1'}:6443",
            "port": 6443, "nodes": [{"name": f"{name}-node-{i}", "phase": "Ready"} for i in range(2)]}


@dataclass
class Response:
    status: int
    body: bytes
    seconds: float

    def json(self) -> Any:
        return orjson.loads(self.body)


class Client:
    """Keep-alive HTTPS to one target with its client certificate; at most ``limit`` connections."""

    def __init__(self, target: Target, limit: int = 32) -> None:
        self.target = target
        self.session = aiohttp.ClientSession(
            base_url=target.url,
            connector=aiohttp.TCPConnector(ssl=target.ssl_context(), limit=limit, force_close=False),
            timeout=aiohttp.ClientTimeout(total=600), skip_auto_headers=("User-Agent",))

    async def close(self) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None, expect: tuple[int, ...] = (200, 201)) -> Response:
        data = orjson.dumps(body) if body is not None else None
        started = time.perf_counter()
        async with self.session.request(method, path, data=data, params=params,
                                        headers=headers or JSON_HEADERS) as resp:
            payload = await resp.read()
        elapsed = time.perf_counter() - started
        if resp.status not in expect:
            raise RequestFailed(f"{self.target.name}: {method} {path} {params or ''} -> {resp.status}: "
                                f"{payload[:400].decode(errors='replace')}")
        return Response(resp.status, payload, elapsed)

    async def list_pages(self, path: str, limit: int, params: dict[str, str] | None = None,
                         decode: bool = False) -> tuple[int, int]:
        """Follow ``continue`` to the end; returns (pages, items). Only ``decode`` counts items: the
        timed runs find the token with a regex rather than decoding every page."""
        items = pages = 0
        token = ""
        while True:
            query = {**(params or {}), "limit": str(limit)}
            if token:
                query["continue"] = token
            resp = await self.request("GET", path, params=query)
            pages += 1
            if decode:
                page = resp.json()
                items += len(page["items"])
                token = page["metadata"].get("continue", "")
            else:
                match = _CONTINUE.search(resp.body)
                token = match.group(1).decode() if match else ""
            if not token:
                return pages, items
