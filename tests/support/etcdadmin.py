"""etcd spoken to directly, through its HTTP gateway: what an operator (or another replica) does
behind the server's back, and the raw key space the server stores VirtualClusters under."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

__all__ = ["VC_PREFIX", "EtcdAdmin", "b64", "lines"]

VC_PREFIX = "/registry/kosmos.io/virtualclusters/"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited documents of a stream, however long (etcd batches 1000 events a line)."""
    buffer = b""
    async for chunk in content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line


class EtcdAdmin:
    """What an operator (or another replica) does to etcd behind the server's back."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.post(self.url + path, json=body,
                                                        timeout=aiohttp.ClientTimeout(total=60)) as r:
            data = await r.json(content_type=None)
            assert r.status == 200 and "error" not in data, (path, r.status, data)
            return data

    async def revision(self) -> int:
        return int((await self.call("/v3/kv/range", {"key": b64("/"), "count_only": True}))["header"]["revision"])

    async def get(self, key: str) -> str | None:
        kvs = (await self.call("/v3/kv/range", {"key": b64(key)})).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    async def compact(self, revision: int) -> None:
        await self.call("/v3/kv/compaction", {"revision": str(revision), "physical": True})

    async def put_objects(self, objects: list[dict[str, Any]]) -> None:
        """Store objects, in order per key, as a server stores them (resourceVersion is etcd's, never stored)."""
        by_key: dict[str, list[dict[str, Any]]] = {}
        for obj in objects:
            meta = obj["metadata"]
            by_key.setdefault(f"{VC_PREFIX}{meta['namespace']}/{meta['name']}", []).append(obj)
        async with aiohttp.ClientSession() as s:
            async def put(key: str, versions: list[dict[str, Any]]) -> None:
                for obj in versions:
                    async with s.post(self.url + "/v3/kv/put", json={
                            "key": b64(key), "value": base64.b64encode(orjson.dumps(obj)).decode()}) as r:
                        assert r.status == 200, await r.text()
            await asyncio.gather(*(put(k, v) for k, v in by_key.items()))

