"""Dry-run in one place (k8s.io/apiserver's ``registry/generic/registry/dryrun.go``): the storage the
generic store writes through, which with ``dry_run`` checks everything a write would and stores
nothing. The store itself has no dry-run branches."""

from __future__ import annotations

from collections.abc import Callable

from apiserver.storage.interface import Obj, Storage, StorageError, UpdateFn

__all__ = ["DryRunnableStorage"]


class DryRunnableStorage:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def create(self, obj: Obj, dry_run: bool) -> Obj:
        if not dry_run:
            return await self.storage.create(obj)
        meta = obj["metadata"]
        try:
            await self.storage.get(meta["namespace"], meta["name"])  # consistent: a create just acknowledged counts
        except StorageError as e:
            if e.code == StorageError.NOT_FOUND:
                return obj
            raise
        raise StorageError(StorageError.EXISTS, f"{meta['namespace']}/{meta['name']} already exists")

    async def guaranteed_update(self, namespace: str, name: str, update: UpdateFn, dry_run: bool,
                                expected_rv: str | None = None) -> tuple[Obj, Obj]:
        if not dry_run:
            return await self.storage.guaranteed_update(namespace, name, update, expected_rv)
        current = await self.storage.get(namespace, name)
        if expected_rv is not None and expected_rv != str(current.rv):
            raise StorageError(StorageError.CONFLICT, f"{namespace}/{name}: resourceVersion {expected_rv} is not current")
        new = await update(current.obj)
        return current.obj, current.obj if new is None else new

    async def delete(self, namespace: str, name: str, dry_run: bool,
                     precondition: Callable[[Obj], None] | None = None) -> Obj:
        if not dry_run:
            return await self.storage.delete(namespace, name, precondition)
        current = (await self.storage.get(namespace, name)).obj
        if precondition is not None:
            precondition(current)
        return current
