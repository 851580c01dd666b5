"""Status writing: conditions with kube's transition rules, written through ``/status``."""

from __future__ import annotations

from typing import Any

import orjson

from apiserver.machinery.timestamps import now_rfc3339
from apiserver.registry.store import Registry, WriteOptions

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"  # RFC 7386, the patch type the registry takes by media type


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


def get_condition(obj: Obj, type_: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


async def patch_object(registry: Registry, obj: Obj, body: Obj, subresource: str = "") -> Obj:
    """A merge patch guarded by the object's resourceVersion (a stale view is a 409, retried by the queue)."""
    meta = obj["metadata"]
    body.setdefault("metadata", {})["resourceVersion"] = meta["resourceVersion"]
    result = await registry.patch(meta["namespace"], meta["name"], MERGE_PATCH, orjson.dumps(body),
                                  WriteOptions(field_validation="Strict"), subresource)
    return result.obj


class StatusWriter:
    """Builds the next status of one object and writes it only when something changed."""

    def __init__(self, registry: Registry, obj: Obj) -> None:
        self.registry = registry
        self.obj = obj
        self.generation = int(obj["metadata"].get("generation", 1))
        current = obj.get("status") or {}
        self.status: Obj = {**current, "conditions": list(current.get("conditions") or [])}

    def condition(self, type_: str, ok: bool, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(self.status["conditions"], type_, "True" if ok else "False",
                                                  reason, message, self.generation)

    def phase(self, phase: str, reason: str, message: str) -> None:
        self.status.update(phase=phase, reason=reason, message=message)

    def set(self, **fields: Any) -> None:
        self.status.update(fields)

    async def write(self) -> Obj:
        self.status["observedGeneration"] = self.generation
        current = self.obj.get("status") or {}
        comparable = {k: v for k, v in self.status.items() if k != "updateTime"}
        if comparable == {k: v for k, v in current.items() if k != "updateTime"}:
            return self.obj
        if (self.status.get("phase"), self.status.get("reason")) != (current.get("phase"), current.get("reason")):
            self.status["updateTime"] = now_rfc3339()
        else:
            self.status["updateTime"] = current.get("updateTime", now_rfc3339())
        return await patch_object(self.registry, self.obj, {"status": self.status}, "status")
