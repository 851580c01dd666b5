"""etcd's own record of every change to a VirtualCluster, the truth fault tests hold the server to:
read with a historical etcd watch (before a compaction destroys it), replayed into the state at
any revision."""

from __future__ import annotations

import base64
import bisect
from dataclasses import dataclass

import aiohttp
import orjson

from tests.support.etcdadmin import VC_PREFIX, EtcdAdmin, b64, lines

__all__ = ["Change", "History", "difference", "scoped"]


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED or DELETED: what a watcher of the object must be shown
    namespace: str
    name: str


class History:
    """etcd's own record of every change to a VirtualCluster, read with a historical etcd watch."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.revs: list[int] = []
        self.puts: set[tuple[str, str, int]] = set()
        self.next = 1  # the first revision not read yet

    async def read(self, url: str) -> None:
        """Everything committed since the last read (before a compaction destroys it)."""
        end = await EtcdAdmin(url).revision()
        if end < self.next:
            return
        body = {"create_request": {"key": b64("\0"), "range_end": b64("\0"), "start_revision": str(self.next)}}
        async with aiohttp.ClientSession() as s, s.post(url + "/v3/watch", json=body,
                                                        timeout=aiohttp.ClientTimeout(total=60)) as r:
            last = self.next - 1
            async for line in lines(r.content):
                result = orjson.loads(line)["result"]
                assert not result.get("canceled"), f"the history was compacted before it was read: {result}"
                for ev in result.get("events", []):
                    kv = ev["kv"]
                    last = rev = int(kv["mod_revision"])
                    key = base64.b64decode(kv["key"]).decode()
                    if rev > end or not key.startswith(VC_PREFIX):
                        continue
                    namespace, name = key[len(VC_PREFIX):].split("/", 1)
                    if ev.get("type") == "DELETE":
                        kind = "DELETED"
                    else:
                        kind = "ADDED" if kv.get("create_revision") == kv.get("mod_revision") else "MODIFIED"
                        self.puts.add((namespace, name, rev))
                    self.changes.append(Change(rev, kind, namespace, name))
                    self.revs.append(rev)
                if last >= end:
                    break
        self.next = end + 1

    def between(self, after: int, upto: int, namespace: str | None) -> list[Change]:
        """Changes with after < rv <= upto, as a watcher of ``namespace`` (None: all) must see them."""
        lo, hi = bisect.bisect_right(self.revs, after), bisect.bisect_right(self.revs, upto)
        return [c for c in self.changes[lo:hi] if namespace is None or c.namespace == namespace]

    def states(self, revisions: set[int]) -> dict[int, dict[tuple[str, str], int]]:
        """The objects (key → resourceVersion) at each of ``revisions``, replayed once."""
        out: dict[int, dict[tuple[str, str], int]] = {}
        state: dict[tuple[str, str], int] = {}
        i = 0
        for rev in sorted(revisions):
            while i < len(self.changes) and self.changes[i].rv <= rev:
                c = self.changes[i]
                if c.type == "DELETED":
                    state.pop((c.namespace, c.name), None)
                else:
                    state[(c.namespace, c.name)] = c.rv
                i += 1
            out[rev] = dict(state)
        return out


def scoped(state: dict[tuple[str, str], int], namespace: str | None) -> dict[tuple[str, str], int]:
    return {k: v for k, v in state.items() if namespace is None or k[0] == namespace}


def difference(expected: dict[tuple[str, str], int], got: dict[tuple[str, str], int]) -> str:
    missing = sorted(set(expected) - set(got))[:3]
    extra = sorted(set(got) - set(expected))[:3]
    stale = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])[:3]
    return (f"missing {missing}, unexpected {extra}, "
            f"wrong resourceVersion {[(k, got[k], expected[k]) for k in stale]}")

