"""The lifecycle controller: status for new objects, finalizer removal on deletion.

It owns one concern: a VirtualCluster's place in its lifecycle. Until a
control-plane runtime exists, it reports that honestly (``Pending``,
``ControlPlaneReady=False``) and lets deletions finish by removing the finalizer.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from apiserver import errors
from apiserver.patch import MERGE_PATCH
from apiserver.registry import Registry, WriteOptions
from apiserver.resource import FINALIZER
from apiserver.wire import now_rfc3339

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NO_RUNTIME_REASON = "NoControlPlaneRuntime"
NO_RUNTIME_MESSAGE = "no control-plane runtime is configured yet; the control plane will not be built"


def set_condition(conditions: list[Obj], type_: str, status: str, reason: str, message: str,
                  generation: int) -> list[Obj]:
    """Upsert a condition; lastTransitionTime only moves when the status changes."""
    now = now_rfc3339()
    out = []
    found = False
    for cond in conditions:
        if cond.get("type") == type_:
            found = True
            changed = cond.get("status") != status
            cond = {**cond, "status": status, "reason": reason, "message": message,
                    "observedGeneration": generation,
                    "lastTransitionTime": now if changed else cond.get("lastTransitionTime", now)}
        out.append(cond)
    if not found:
        out.append({"type": type_, "status": status, "reason": reason, "message": message,
                    "observedGeneration": generation, "lastTransitionTime": now})
    return out


class LifecycleController:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            obj = await self.registry.get(namespace, name)
        except errors.ApiError as e:
            if e.code == 404:
                return
            raise
        if obj["metadata"].get("deletionTimestamp"):
            await self._finalize(obj)
        else:
            await self._report(obj)

    async def _patch(self, obj: Obj, body: Obj, subresource: str = "") -> None:
        meta = obj["metadata"]
        body.setdefault("metadata", {})["resourceVersion"] = meta["resourceVersion"]
        await self.registry.patch(meta["namespace"], meta["name"], MERGE_PATCH, orjson.dumps(body),
                                  WriteOptions(field_validation="Strict"), subresource)

    async def _finalize(self, obj: Obj) -> None:
        finalizers = obj["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        remaining = [f for f in finalizers if f != FINALIZER]
        log.info("releasing %s/%s: nothing owned, removing finalizer",
                 obj["metadata"]["namespace"], obj["metadata"]["name"])
        await self._patch(obj, {"metadata": {"finalizers": remaining or None}})

    async def _report(self, obj: Obj) -> None:
        generation = int(obj["metadata"].get("generation", 1))
        status = obj.get("status") or {}
        if status.get("phase") == "Pending" and status.get("observedGeneration") == generation:
            return
        conditions = list(status.get("conditions") or [])
        for type_ in ("ControlPlaneReady", "NodesReady", "Ready"):
            conditions = set_condition(conditions, type_, "False", NO_RUNTIME_REASON, NO_RUNTIME_MESSAGE,
                                       generation)
        new_status = {**status, "phase": "Pending", "reason": NO_RUNTIME_REASON, "message": NO_RUNTIME_MESSAGE,
                      "updateTime": now_rfc3339(), "observedGeneration": generation, "conditions": conditions}
        await self._patch(obj, {"status": new_status}, "status")
