"""The generic store: Kubernetes object semantics for one resource, objects in and objects out
(k8s.io/apiserver's ``registry/generic/registry/store.go``).

What every resource shares lives here: ObjectMeta system fields, generateName, preconditions,
finalizers and graceful deletion, admission. What is particular to a resource comes from its
:class:`~apiserver.registry.rest.Strategy`. Requests arrive decoded (``apiserver.endpoints``);
storage is one :class:`~apiserver.storage.interface.Storage` (the cache-or-etcd choice is made
below this layer), dry-run is one wrapper (:mod:`apiserver.registry.dryrun`), and every storage
error is translated here into the Status a client sees.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import Callable, Iterator, Sequence

from apiserver.machinery import errors, validation
from apiserver.machinery.fieldpath import type_errors
from apiserver.machinery.golang import go_bad_value, go_quote, parse_uint64
from apiserver.machinery.jsonutil import json_copy
from apiserver.machinery.timefmt import now_rfc3339
from apiserver.registry.admission import Admission, AdmissionRequest
from apiserver.registry.dryrun import DryRunnableStorage
from apiserver.registry.fieldmanager import FieldManager, timestamps_only_changed
from apiserver.registry.rest import (
    DeleteOptions,
    ListOptions,
    Obj,
    Result,
    Strategy,
    UpdatedObject,
    WriteOptions,
)
from apiserver.registry.storageerrors import to_api_error
from apiserver.storage.interface import Entry, Event, ListResult, Storage, StorageError, Watch
from apiserver.storage.versioner import parse_uint_error

__all__ = ["Registry", "generate_name"]

SYSTEM_FIELDS_ON_CREATE = ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                           "selfLink")
SYSTEM_FIELDS_KEPT_ON_UPDATE = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                                "generation")


def generate_name(base: str) -> str:
    """kube's name generator: the prefix (at most 58 characters) and five random characters."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return base[:58] + "".join(secrets.choice(alphabet) for _ in range(5))


class Registry:
    """Kubernetes semantics for one resource."""

    def __init__(self, storage: Storage, strategy: Strategy, admission: Sequence[Admission] = ()) -> None:
        self.storage = storage
        self._writes = DryRunnableStorage(storage)
        self.strategy = strategy
        self.info = strategy.info
        self.admission = list(admission)
        self.field_manager = FieldManager(strategy.field_type, self.info.group_version)

    @contextlib.contextmanager
    def _translated(self, name: str = "") -> Iterator[None]:
        """Storage errors leave this layer as API Status errors."""
        try:
            yield
        except StorageError as e:
            raise to_api_error(e, self.info, name) from e

    def _invalid(self, name: str, causes: list[errors.Cause], obj: Obj | None = None) -> errors.ApiError:
        """422 naming the object's own kind and group (kube's ``ObjectKinds`` of what was sent)."""
        kind, group = self.info.kind, self.info.group
        if obj is not None and isinstance(obj.get("kind"), str):
            kind = obj["kind"]
            api_version = obj.get("apiVersion")
            group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        return errors.invalid(kind, group, name, causes)

    def _conflict(self, name: str, detail: str = errors.CONFLICT_MODIFIED) -> errors.ApiError:
        return errors.conflict(self.info.resource, self.info.group, name, detail)

    def _kube_key(self, namespace: str, name: str) -> str:
        """The key kube-apiserver would store the object under, as its storage errors name it."""
        return f"/registry/{self.info.group}/{self.info.resource}/{namespace}/{name}"

    # -- reads -----------------------------------------------------------------------

    async def get(self, namespace: str, name: str, resource_version: str = "") -> Obj:
        """A private copy of the object: the caller may change it (the stored entry is shared)."""
        return (await self.get_entry(namespace, name, resource_version)).obj

    async def get_entry(self, namespace: str, name: str, resource_version: str = "") -> Entry:
        """One object, shared with every other reader (``entry.json()`` is encoded once)."""
        with self._translated(name):
            return await self.storage.get(namespace, name, resource_version)

    async def list(self, namespace: str | None, opts: ListOptions) -> ListResult:
        with self._translated():
            return await self.storage.list(namespace, opts)

    async def watch(self, namespace: str | None, opts: ListOptions, bookmarks: bool,
                    send_initial_events: bool | None) -> tuple[Watch, list[Event], int | None]:
        """Register a watcher; see :meth:`~apiserver.storage.delegator.CachedStore.watch`."""
        with self._translated():
            return await self.storage.watch(namespace, opts, bookmarks, send_initial_events)

    # -- writes ----------------------------------------------------------------------

    def _check_namespace(self, obj: Obj, namespace: str) -> None:
        meta = obj["metadata"]
        body_ns = meta.get("namespace")
        if body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace

    async def create(self, namespace: str, obj: Obj, opts: WriteOptions, applied: bool = False) -> Result:
        """Store a new object (``obj`` is decoded, checked for its kind and pruned; it is taken over).
        ``applied``: its managedFields are an apply's, already made."""
        self._check_namespace(obj, namespace)
        if not applied:
            self.field_manager.update(None, obj, opts.field_manager)
        meta = obj["metadata"]
        # A resourceVersion that parses to a revision is refused by storage (kube's etcd3 store).
        requested_rv = isinstance(meta.get("resourceVersion"), str) and \
            bool(parse_uint64(meta["resourceVersion"], 2**64 - 1))
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generate_name(str(meta["generateName"]))
        for system_field in SYSTEM_FIELDS_ON_CREATE:
            meta.pop(system_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        self.strategy.prepare_for_create(obj)
        causes = self.strategy.validate_type(obj) or \
            validation.validate_object_meta(meta, namespaced=True) + self.strategy.validate(obj)
        if causes:
            name = meta.get("name") or meta.get("generateName") or ""
            raise self._invalid(name if isinstance(name, str) else "", causes, obj)
        await self._admit(AdmissionRequest(self.info, obj, None, opts.user, opts.dry_run))
        warnings = self.strategy.warnings_on_create(obj)
        if requested_rv and not opts.dry_run:
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        with self._translated(meta["name"]):
            return Result(await self._writes.create(obj, opts.dry_run), warnings, created=True)

    async def update(self, namespace: str, name: str, obj: Obj, opts: WriteOptions,
                     subresource: str = "") -> Result:
        """Replace the object (PUT): ``obj`` must carry the resourceVersion it was read at, and a uid
        in it is a precondition."""
        self._check_namespace(obj, namespace)
        body_name = obj["metadata"].get("name") or ""
        if body_name != name:
            raise errors.bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        rv = obj["metadata"].get("resourceVersion") or ""
        valid = parse_uint64(rv, 2**64 - 1) if isinstance(rv, str) else None

        async def replace(current: Obj) -> Obj:
            if rv in ("", "0"):  # kube checks this once it has found the object
                raise errors.invalid(self.info.resource, self.info.group, name, [errors.Cause(
                    errors.FIELD_VALUE_INVALID, "Invalid value: 0: must be specified for an update",
                    "metadata.resourceVersion")])
            if valid is None:
                raise errors.bad_request(parse_uint_error(rv))
            return json_copy(obj)
        uid = obj["metadata"].get("uid") if subresource != "status" else None
        return await self._update(namespace, name, replace, opts, subresource,
                                  expected_rv=rv if valid else None, uid=uid or None)

    async def update_with(self, namespace: str, name: str, updated: UpdatedObject, opts: WriteOptions,
                          subresource: str = "") -> Result:
        """Update the object by a function of its current state (a patch): the function may run more
        than once, against a newer state each time a concurrent write wins."""
        return await self._update(namespace, name, updated, opts, subresource)

    async def apply(self, namespace: str, name: str, config: Obj, opts: WriteOptions, subresource: str,
                    check: Callable[[Obj], Obj]) -> Result:
        """Server-side apply of ``config`` by ``opts.field_manager`` (``opts.force`` takes fields
        over): merged into the current object by the field manager, or into an empty one when
        there is none (not through ``/status``); ``check`` decodes the merged object as a request
        body (kind, pruning, fieldValidation, the name on the URL)."""
        api_version, kind = config.get("apiVersion"), config.get("kind")
        if api_version != self.info.group_version or kind != self.info.kind:
            group, _, version = str(api_version or "").rpartition("/")
            raise errors.bad_request(f"invalid object type: {group}/{version}, Kind={kind or ''}")
        meta = config.get("metadata")
        if isinstance(meta, dict) and meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        unknown = self.strategy.prune(json_copy(config))
        problems = [f".{path}: field not declared in schema" for path in unknown] + \
            type_errors(config, self.strategy.field_type)
        if problems:  # the configuration does not type-check: kube answers 500 (kubernetes#122480)
            meta = meta if isinstance(meta, dict) else {}
            detail = problems[0] if len(problems) == 1 else "\n".join(["errors:", *(f"  {p}" for p in problems)])
            raise errors.ApiError(500, "", f"failed to create typed patch object ({meta.get('namespace', '')}/"
                                           f"{meta.get('name', '')}; {api_version}, Kind={kind}): {detail}")
        try:
            await self.get(namespace, name)
            exists = True
        except errors.ApiError as e:
            if e.code != 404 or subresource:
                raise
            exists = False
        if not exists:
            new = check(self.field_manager.apply(None, config, opts.field_manager, subresource, opts.force))
            uid = new["metadata"].get("uid")
            if uid:
                raise self._conflict(name, f"uid mismatch: the provided object specified uid {uid}, and no "
                                           "existing object was found")
            if not new["metadata"].get("name"):
                raise errors.bad_request(f"the name of the object () does not match the name on the URL ({name})")
            return await self.create(namespace, new, opts, applied=True)

        async def applied(current: Obj) -> Obj:
            return check(self.field_manager.apply(current, config, opts.field_manager, subresource, opts.force))
        return await self._update(namespace, name, applied, opts, subresource, tracked=True)

    async def _update(self, namespace: str, name: str, updated: UpdatedObject, opts: WriteOptions,
                      subresource: str, expected_rv: str | None = None, tracked: bool = False,
                      uid: str | None = None) -> Result:
        async def update(current: Obj) -> Obj:
            if uid is not None and uid != current["metadata"].get("uid"):  # storage's precondition
                raise self._conflict(name, f"StorageError: invalid object, Code: 4, Key: {self._kube_key(namespace, name)}"
                                           f", ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in "
                                           f"precondition: {uid}, UID in object meta: {current['metadata'].get('uid')}")
            new = await updated(current)
            self._check_namespace(new, namespace)
            new["metadata"]["name"] = name
            if str(new["metadata"].get("resourceVersion", "")) != current["metadata"]["resourceVersion"]:
                raise self._conflict(name)
            if not tracked:  # an apply's managedFields are made with the merge
                self.field_manager.update(current, new, opts.field_manager, subresource)
            managed_fields = new["metadata"].get("managedFields")
            new = self._prepare_update(new, current, subresource)
            if managed_fields is None:  # the strategy may have copied the stored object's metadata
                new["metadata"].pop("managedFields", None)
            else:
                new["metadata"]["managedFields"] = managed_fields
            if timestamps_only_changed(new, current):
                new["metadata"]["managedFields"] = current["metadata"]["managedFields"]
            if not subresource:
                await self._admit(AdmissionRequest(self.info, new, current, opts.user, opts.dry_run))
            warnings[:] = self.strategy.warnings_on_update(new, current)
            return new
        warnings: list[str] = []
        with self._translated(name):
            _, new = await self._writes.guaranteed_update(namespace, name, update, opts.dry_run,
                                                          expected_rv=expected_rv)
        return Result(new, warnings)

    async def _admit(self, request: AdmissionRequest) -> None:
        for plugin in self.admission:
            await plugin.admit(request)

    def _prepare_update(self, new: Obj, old: Obj, subresource: str) -> Obj:
        """System fields restored from the stored object, then the strategy's rules, then validation."""
        if subresource == "status":
            new = self.strategy.prepare_for_status_update(new, old)
            causes = self.strategy.validate_status(new)
        else:
            meta, old_meta = new["metadata"], old["metadata"]
            causes = []
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):  # a patch may not change it
                causes.append(errors.Cause(errors.FIELD_VALUE_INVALID,
                                           f"Invalid value: {go_bad_value(meta['uid'])}: field is immutable",
                                           "metadata.uid"))
            for system_field in SYSTEM_FIELDS_KEPT_ON_UPDATE:
                if system_field in old_meta:
                    meta[system_field] = old_meta[system_field]
                else:
                    meta.pop(system_field, None)
            meta.pop("selfLink", None)
            self.strategy.prepare_for_update(new, old)
            type_causes = self.strategy.validate_type(new)
            if type_causes:
                raise self._invalid(old["metadata"]["name"], type_causes, new)
            causes = validation.validate_object_meta(meta, namespaced=True) + causes + \
                self.strategy.validate_update(new, old)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    causes.append(errors.Cause(
                        errors.FIELD_VALUE_FORBIDDEN,
                        f"Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers []string{{{', '.join(go_quote(f) for f in sorted(added))}}}",
                        "metadata.finalizers"))
        if causes:
            raise self._invalid(old["metadata"]["name"], causes, new)
        return new

    async def delete(self, namespace: str, name: str, options: DeleteOptions, opts: WriteOptions) -> tuple[Obj, bool]:
        """Delete, or mark for deletion while finalizers remain. Returns (object, removed-now)."""

        def check(current: Obj) -> None:
            """DeleteOptions' preconditions, worded as kube's ``BeforeDelete`` words them."""
            meta = current["metadata"]
            if options.uid is not None and options.uid != meta.get("uid"):
                raise errors.conflict(self.info.kind, self.info.group, name, (
                    f"the UID in the precondition ({options.uid}) does not match the UID in record "
                    f"({meta.get('uid')}). The object might have been deleted and then recreated"))
            if options.resource_version is not None and options.resource_version != meta.get("resourceVersion"):
                raise errors.conflict(self.info.kind, self.info.group, name, (
                    f"the ResourceVersion in the precondition ({options.resource_version}) does not match the "
                    f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might have been "
                    "modified"))

        async def mark(obj: Obj) -> Obj:
            check(obj)
            meta = obj["metadata"]
            if not meta.get("finalizers") or meta.get("deletionTimestamp"):
                return obj
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            meta["generation"] = int(meta.get("generation", 1)) + 1
            return obj

        with self._translated(name):
            current = (await self.storage.get(namespace, name)).obj
            check(current)
            if current["metadata"].get("finalizers"):
                if current["metadata"].get("deletionTimestamp"):
                    return current, False
                _, new = await self._writes.guaranteed_update(namespace, name, mark, opts.dry_run)
                if new["metadata"].get("deletionTimestamp"):
                    return new, False
            return await self._writes.delete(namespace, name, opts.dry_run, precondition=check), True

    async def delete_collection(self, namespace: str | None, list_opts: ListOptions, options: DeleteOptions,
                                opts: WriteOptions) -> tuple[list[Obj], int]:
        """The objects deleted (or marked), and the revision of the list they were found in."""
        listed = await self.list(namespace, ListOptions(list_opts.label_selector, list_opts.field_selector))
        out = []
        for entry in listed.entries:
            try:
                obj, _ = await self.delete(entry.namespace, entry.name, options, opts)
            except errors.ApiError as e:
                if e.code == 404:
                    continue
                raise
            out.append(obj)
        return out, listed.resource_version
