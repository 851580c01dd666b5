"""The VirtualClusterCredential strategy: an object the server writes (the ``kubeconfig`` subresource
creates it, the authorization webhook records its last use) and clients read and delete. Its spec
never changes once issued."""

from __future__ import annotations

from typing import Any

from apiserver.apis import credential
from apiserver.apis.resource import VIRTUALCLUSTERCREDENTIALS
from apiserver.machinery.errors import FIELD_VALUE_INVALID, Cause
from apiserver.machinery.fieldpath import type_of
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import age
from apiserver.registry.rest import Column, keep_status, status_update, validate_type_meta

__all__ = ["CredentialStrategy"]


class CredentialStrategy:
    info = VIRTUALCLUSTERCREDENTIALS
    field_type = type_of(credential.CredentialSchema)
    columns = (
        Column("Name", "string", "The credential's id (its client certificate carries it).", format="name"),
        Column("Cluster", "string", "The VirtualCluster it opens."),
        Column("User", "string", "The host user it was issued to."),
        Column("Expires", "string", "When it expires (RFC 3339)."),
        Column("Last Used", "date", "When the tenant last served a request made with it."),
        Column("Age", "date", "Time since it was issued."),
        Column("Groups", "string", "The host user's groups when it was issued.", priority=1),
    )

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        obj["metadata"]["generation"] = 1

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        keep_status(new, old)
        new["metadata"]["generation"] = old["metadata"].get("generation", 1)

    def prepare_for_status_update(self, new: Obj, old: Obj) -> Obj:
        return status_update(new, old)

    def warnings_on_create(self, obj: Obj) -> list[str]:
        return []

    def warnings_on_update(self, new: Obj, old: Obj) -> list[str]:
        return []

    def validate_type(self, obj: Obj) -> list[Cause]:
        return validate_type_meta(self.info, obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return credential.validate_spec(obj.get("spec")) + credential.validate_status(obj.get("status"))

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = credential.validate_status(new.get("status")) if new.get("status") != old.get("status") else []
        if new.get("spec") != old.get("spec"):
            causes.append(Cause(FIELD_VALUE_INVALID, "Invalid value: the spec of an issued credential is "
                                                     "immutable", "spec"))
        return causes

    def validate_status(self, obj: Obj) -> list[Cause]:
        return credential.validate_status(obj.get("status"))

    def prune(self, obj: Obj) -> list[str]:
        return credential.prune_unknown_fields(obj)

    def cells(self, obj: Obj) -> list[Any]:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return [meta.get("name", ""), spec.get("virtualCluster"), spec.get("user"),
                spec.get("expirationTimestamp"), age(status["lastUsedTime"]) if status.get("lastUsedTime") else None,
                age(meta.get("creationTimestamp")),
                ",".join(spec.get("groups") or []) or None]
