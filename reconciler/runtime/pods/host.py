"""The ``pods`` runtime's calls to the host: kubeclient's verbs on kinds, each failure explained once.

A pass that fails tells the user why on the VirtualCluster's condition, so every call names what it
was doing, and a Status from the host or no answer at all becomes a RuntimeFailure saying so, here and
nowhere else. What a call may find already done (gone, to a read or a delete; there, to a create) is an
answer, not a failure.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from apiserver.kubeclient import paths
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from reconciler.runtime.base import FIELD_MANAGER, Obj, RuntimeFailure

__all__ = ["Host"]

NOT_FOUND, CONFLICT = 404, 409
# children go after their owner is gone, so nothing is left to recreate what a teardown removes
BACKGROUND = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


@dataclass(frozen=True)
class Host:
    """The host cluster, as the pods runtime writes to it (field manager ``vc-apiserver``)."""

    client: KubeClient

    async def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object, or None when there is none."""
        return await _explained(f"reading {kind} {namespace}/{name}", self.client.get(paths.path(kind, namespace, name)),
                                tolerate=NOT_FOUND)

    async def list(self, kind: str, namespace: str | None, selector: str) -> list[Obj]:
        """The objects ``selector`` picks, in ``namespace`` or in all of them."""
        found = await _explained(f"listing {kind}", self.client.get(paths.path(kind, namespace), labelSelector=selector))
        return list(found.get("items") or [])

    async def apply(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return await _explained(f"applying {obj['kind']} {meta['namespace']}/{meta['name']}",
                                self.client.apply(obj, FIELD_MANAGER))

    async def create(self, obj: Obj, *, exists_ok: bool = False) -> None:
        """``exists_ok`` for objects made once and never changed after (claims: a spec that cannot
        shrink): one that already exists, ours or a concurrent pass's, is left as it is."""
        meta = obj["metadata"]
        await _explained(f"creating {obj['kind']} {meta['namespace']}/{meta['name']}",
                         self.client.create(paths.path(obj["kind"], meta["namespace"]), obj, fieldManager=FIELD_MANAGER),
                         tolerate=CONFLICT if exists_ok else None)

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Deleted, or already gone; what it owns goes after it."""
        await _explained(f"deleting {kind} {namespace}/{name}",
                         self.client.delete(paths.path(kind, namespace, name), BACKGROUND), tolerate=NOT_FOUND)

    async def scale_to_zero(self, kind: str, namespace: str, name: str) -> None:
        await _explained(f"scaling {kind} {namespace}/{name} to zero",
                         self.client.patch(paths.path(kind, namespace, name), {"spec": {"replicas": 0}},
                                           fieldManager=FIELD_MANAGER))

    async def log(self, namespace: str, pod: str, **params: str) -> str:
        """A pod's log (``params``: container, tailLines, sinceTime), undecodable bytes replaced."""
        text = await _explained(f"reading the log of pod {namespace}/{pod}", self.client.log(namespace, pod, **params))
        return text.decode(errors="replace")


async def _explained(what: str, call: Awaitable[Any], tolerate: int | None = None) -> Any:
    """``call``'s answer; None for an answer of ``tolerate``; any other failure as a RuntimeFailure."""
    try:
        return await call
    except HostError as e:
        if e.code == tolerate:
            return None
        raise RuntimeFailure(e.reason or "HostRejected", f"{what}: the host answered {e.code}: {e.message}") from None
    except HostUnavailable as e:
        raise RuntimeFailure("HostUnavailable", f"{what}: {e}") from None
