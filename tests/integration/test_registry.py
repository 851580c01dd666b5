"""The generic store's Kubernetes semantics, called in-process with objects against a real etcd
(as k8s.io/apiserver's ``registry/rest/resttest`` runs against a REST store): system fields,
updates and the status subresource, finalizers and graceful deletion, preconditions, dry-run,
paging, selectors, watch filtering and how storage errors reach a client. No HTTP: what the
endpoints decode is what these tests hand the registry."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from apiserver.apis.resource import FINALIZER, VIRTUALCLUSTERS
from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.machinery.errors import ApiError
from apiserver.machinery.selectors import parse_field_selector, parse_label_selector
from apiserver.registry.rest import DeleteOptions, ListOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster import VirtualClusterStrategy
from apiserver.storage.cacher import WatchCache, Watcher
from apiserver.storage.delegator import CachedStore
from apiserver.storage.etcd3 import Store
from apiserver.storage.interface import ADDED, DELETED, MODIFIED, StorageError
from hack.harness import Etcd
from tests.conftest import start_etcd, vc

Obj = dict[str, Any]
WRITE = WriteOptions()
DRY_RUN = WriteOptions(dry_run=True)
KEEP = DeleteOptions()
TEST_FINALIZER = "example.com/hold"
_namespaces = itertools.count()


@pytest.fixture(scope="module")
def own_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = start_etcd(tmp_path_factory.mktemp("registry"), "etcd")
    yield server
    server.stop()


@pytest.fixture
async def etcd_store(own_etcd: Etcd) -> AsyncIterator[Store]:
    """The etcd store under the registry: what is really stored, read past the cache."""
    client = EtcdClient(EtcdConfig([own_etcd.url], request_timeout=2.0))
    await client.start()
    yield Store(client, VIRTUALCLUSTERS)
    await client.close()


@pytest.fixture
async def registry(etcd_store: Store) -> AsyncIterator[Registry]:
    """The registry as the server builds it: the VirtualCluster strategy over the cached delegator."""
    cache = WatchCache(etcd_store.etcd, etcd_store.layout)
    await cache.start()
    await asyncio.wait_for(cache.wait_ready(), 10)
    yield Registry(CachedStore(etcd_store, cache), VirtualClusterStrategy())
    await cache.stop()


@pytest.fixture
def ns() -> str:
    """A namespace of its own for each test."""
    return f"reg-{next(_namespaces)}"


def body(name: str, ns: str, spec: Obj | None = None, **meta: Any) -> Obj:
    return vc(name, ns, spec, **meta)


def nodes(count: int) -> Obj:
    return {"promotePolicies": [{"nodeCount": count}]}


async def create(registry: Registry, ns: str, name: str, **meta: Any) -> Obj:
    return (await registry.create(ns, body(name, ns, **meta), WRITE)).obj


async def stored(etcd_store: Store, ns: str, name: str) -> Obj | None:
    """What etcd holds for the object right now (None when nothing)."""
    try:
        return (await etcd_store.get(ns, name)).obj
    except StorageError as e:
        assert e.code == StorageError.NOT_FOUND
        return None


async def api_error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as e:
        await call
    return e.value


async def release(registry: Registry, ns: str, name: str) -> Obj:
    """Remove every finalizer (as the reconciler does when it has cleaned up)."""
    current = await registry.get(ns, name)
    current["metadata"]["finalizers"] = []
    return (await registry.update(ns, name, current, WRITE)).obj


# -- system fields on create ---------------------------------------------------------------


async def test_create_sets_uid_creation_timestamp_generation_and_the_finalizer(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "fresh")
    meta = created["metadata"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["generation"] == 1
    assert meta["finalizers"] == [FINALIZER]
    assert int(meta["resourceVersion"]) > 0
    assert await registry.get(ns, "fresh") == created


async def test_create_drops_the_system_fields_a_client_sends(registry: Registry, etcd_store: Store, ns: str) -> None:
    sent = body("forged", ns, uid="11111111-2222-3333-4444-555555555555", resourceVersion="0",
                deletionTimestamp="2020-01-01T00:00:00Z", deletionGracePeriodSeconds=30,
                managedFields=[{"manager": "me", "operation": "Update"}], creationTimestamp="2000-01-01T00:00:00Z",
                generation=9)
    sent["status"] = {"phase": "Completed"}
    created = (await registry.create(ns, sent, WRITE)).obj
    meta = created["metadata"]
    assert meta["uid"] != "11111111-2222-3333-4444-555555555555"
    assert meta["resourceVersion"] != "0"
    assert meta["creationTimestamp"] != "2000-01-01T00:00:00Z"
    assert meta["generation"] == 1
    for dropped in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        assert dropped not in meta
    # managedFields are the client's to write, but an entry that does not decode (no apiVersion,
    # no fieldsType) is ignored as kube ignores it: the create is tracked from scratch, and a
    # manager without a name is "unknown".
    [entry] = meta["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == ("unknown", "Update", "kosmos.io/v1alpha1")
    assert "status" not in created
    assert await stored(etcd_store, ns, "forged") == created


async def test_generate_name_yields_a_name_with_the_prefix_and_five_random_characters(
        registry: Registry, ns: str) -> None:
    first = (await registry.create(ns, body("", ns, generateName="tenant-"), WRITE)).obj
    second = (await registry.create(ns, body("", ns, generateName="tenant-"), WRITE)).obj
    for created in (first, second):
        assert re.fullmatch(r"tenant-[a-z0-9]{5}", created["metadata"]["name"])
        assert created["metadata"]["generateName"] == "tenant-"
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert (await registry.get(ns, first["metadata"]["name"]))["metadata"]["uid"] == first["metadata"]["uid"]


async def test_a_body_namespace_other_than_the_requests_is_a_bad_request_and_stores_nothing(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    e = await api_error(registry.create(ns, body("elsewhere", "other-namespace"), WRITE))
    assert (e.code, e.reason) == (400, "BadRequest")
    assert "does not match the namespace" in e.message
    assert await stored(etcd_store, ns, "elsewhere") is None
    assert await stored(etcd_store, "other-namespace", "elsewhere") is None


async def test_a_body_without_a_namespace_takes_the_requests(registry: Registry, ns: str) -> None:
    sent = body("unplaced", ns)
    del sent["metadata"]["namespace"]
    created = (await registry.create(ns, sent, WRITE)).obj
    assert created["metadata"]["namespace"] == ns


async def test_an_invalid_spec_is_unprocessable_and_stores_nothing(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    e = await api_error(registry.create(ns, body("bad", ns, {"promotePolicies": [{"nodeCount": -1}]}), WRITE))
    assert (e.code, e.reason) == (422, "Invalid")
    assert e.message.startswith('VirtualCluster.kosmos.io "bad" is invalid: spec.promotePolicies[0].nodeCount')
    assert await stored(etcd_store, ns, "bad") is None


# -- updates ---------------------------------------------------------------------------------


async def test_an_update_keeps_uid_and_creation_timestamp_whatever_the_body_says(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "kept")
    sent = await registry.get(ns, "kept")
    del sent["metadata"]["uid"]
    sent["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
    sent["metadata"]["generation"] = 40
    sent["metadata"]["labels"] = {"touched": "yes"}
    updated = (await registry.update(ns, "kept", sent, WRITE)).obj
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    assert updated["metadata"]["labels"] == {"touched": "yes"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


async def test_generation_is_bumped_by_a_spec_change_and_only_by_one(registry: Registry, ns: str) -> None:
    await registry.create(ns, body("gen", ns, nodes(1)), WRITE)
    relabelled = await registry.get(ns, "gen")
    relabelled["metadata"]["labels"] = {"a": "b"}
    relabelled["metadata"]["annotations"] = {"c": "d"}
    after_metadata = (await registry.update(ns, "gen", relabelled, WRITE)).obj
    assert after_metadata["metadata"]["generation"] == 1

    resized = await registry.get(ns, "gen")
    resized["spec"] = nodes(2)
    after_spec = (await registry.update(ns, "gen", resized, WRITE)).obj
    assert after_spec["metadata"]["generation"] == 2
    assert (await registry.get(ns, "gen"))["spec"] == nodes(2)


async def test_an_update_through_a_function_of_the_current_state_is_stored(registry: Registry, ns: str) -> None:
    await create(registry, ns, "patched")

    async def label(current: Obj) -> Obj:
        current["metadata"].setdefault("labels", {})["patched"] = "yes"
        return current
    updated = (await registry.update_with(ns, "patched", label, WRITE)).obj
    assert updated["metadata"]["labels"] == {"patched": "yes"}
    assert (await registry.get(ns, "patched"))["metadata"]["labels"] == {"patched": "yes"}


async def test_a_put_without_a_resource_version_is_unprocessable(registry: Registry, ns: str) -> None:
    await create(registry, ns, "unversioned")
    sent = await registry.get(ns, "unversioned")
    del sent["metadata"]["resourceVersion"]
    sent["metadata"]["labels"] = {"lost": "yes"}
    e = await api_error(registry.update(ns, "unversioned", sent, WRITE))
    assert (e.code, e.reason) == (422, "Invalid")
    assert e.causes[0].field == "metadata.resourceVersion"
    assert "must be specified for an update" in e.message
    assert "labels" not in (await registry.get(ns, "unversioned"))["metadata"]


async def test_a_put_at_a_stale_resource_version_is_a_conflict_and_changes_nothing(
        registry: Registry, ns: str) -> None:
    await create(registry, ns, "stale")
    read = await registry.get(ns, "stale")
    newer = await registry.get(ns, "stale")
    newer["metadata"]["labels"] = {"first": "writer"}
    current = (await registry.update(ns, "stale", newer, WRITE)).obj
    read["metadata"]["labels"] = {"second": "writer"}
    e = await api_error(registry.update(ns, "stale", read, WRITE))
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message == ('Operation cannot be fulfilled on virtualclusters.kosmos.io "stale": the object has been '
                         'modified; please apply your changes to the latest version and try again')
    assert await registry.get(ns, "stale") == current


async def test_a_put_with_another_uid_is_refused_and_changes_nothing(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "uid")
    sent = await registry.get(ns, "uid")
    sent["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
    sent["metadata"]["labels"] = {"lost": "yes"}
    e = await api_error(registry.update(ns, "uid", sent, WRITE))
    assert e.code in (409, 422)
    assert await registry.get(ns, "uid") == created


async def test_a_put_with_another_uid_is_a_precondition_conflict_as_in_kube(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "uid-kube")
    sent = await registry.get(ns, "uid-kube")
    sent["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
    e = await api_error(registry.update(ns, "uid-kube", sent, WRITE))
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message.endswith("Precondition failed: UID in precondition: 11111111-2222-3333-4444-555555555555, "
                              f"UID in object meta: {created['metadata']['uid']}")


async def test_an_immutable_spec_field_cannot_change(registry: Registry, ns: str) -> None:
    await registry.create(ns, body("fixed", ns, {"externalIP": "10.0.0.1"}), WRITE)
    sent = await registry.get(ns, "fixed")
    sent["spec"]["externalIP"] = "10.0.0.2"
    e = await api_error(registry.update(ns, "fixed", sent, WRITE))
    assert (e.code, e.reason) == (422, "Invalid")
    assert e.causes[0].field == "spec.externalIP"
    assert "field is immutable" in e.causes[0].message
    assert (await registry.get(ns, "fixed"))["spec"] == {"externalIP": "10.0.0.1"}


# -- the status subresource --------------------------------------------------------------------


async def test_a_status_update_changes_only_status(registry: Registry, ns: str) -> None:
    created = (await registry.create(ns, body("st", ns, nodes(1)), WRITE)).obj
    sent = await registry.get(ns, "st")
    sent["status"] = {"phase": "Preparing", "observedGeneration": 1}
    sent["spec"] = nodes(5)
    sent["metadata"]["labels"] = {"ignored": "yes"}
    sent["metadata"]["finalizers"] = []
    updated = (await registry.update(ns, "st", sent, WRITE, subresource="status")).obj
    assert updated["status"] == {"phase": "Preparing", "observedGeneration": 1}
    assert updated["spec"] == nodes(1)
    assert updated["metadata"]["generation"] == 1
    assert "labels" not in updated["metadata"]
    assert updated["metadata"]["finalizers"] == [FINALIZER]
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert await registry.get(ns, "st") == updated


async def test_a_main_update_cannot_change_status(registry: Registry, ns: str) -> None:
    await create(registry, ns, "main")
    with_status = await registry.get(ns, "main")
    with_status["status"] = {"phase": "Completed"}
    await registry.update(ns, "main", with_status, WRITE, subresource="status")

    sent = await registry.get(ns, "main")
    sent["status"] = {"phase": "Deleting"}
    sent["metadata"]["labels"] = {"changed": "yes"}
    updated = (await registry.update(ns, "main", sent, WRITE)).obj
    assert updated["status"] == {"phase": "Completed"}
    assert updated["metadata"]["labels"] == {"changed": "yes"}

    sent = await registry.get(ns, "main")
    del sent["status"]
    assert (await registry.update(ns, "main", sent, WRITE)).obj["status"] == {"phase": "Completed"}


async def test_a_status_update_without_status_removes_it(registry: Registry, ns: str) -> None:
    await create(registry, ns, "cleared")
    sent = await registry.get(ns, "cleared")
    sent["status"] = {"phase": "Pending"}
    await registry.update(ns, "cleared", sent, WRITE, subresource="status")
    sent = await registry.get(ns, "cleared")
    del sent["status"]
    assert "status" not in (await registry.update(ns, "cleared", sent, WRITE, subresource="status")).obj


async def test_an_invalid_status_is_unprocessable(registry: Registry, ns: str) -> None:
    await create(registry, ns, "badstatus")
    sent = await registry.get(ns, "badstatus")
    sent["status"] = {"phase": "Exploded"}
    e = await api_error(registry.update(ns, "badstatus", sent, WRITE, subresource="status"))
    assert (e.code, e.reason) == (422, "Invalid")
    assert e.causes[0].field == "status.phase"
    assert "status" not in await registry.get(ns, "badstatus")


async def test_a_status_update_at_a_stale_resource_version_is_a_conflict(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "stalestatus")
    relabelled = await registry.get(ns, "stalestatus")
    relabelled["metadata"]["labels"] = {"moved": "on"}
    await registry.update(ns, "stalestatus", relabelled, WRITE)
    created["status"] = {"phase": "Pending"}
    e = await api_error(registry.update(ns, "stalestatus", created, WRITE, subresource="status"))
    assert (e.code, e.reason) == (409, "Conflict")


# -- finalizers and graceful deletion ------------------------------------------------------------


async def test_deleting_an_object_with_a_finalizer_marks_it_and_keeps_it(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "held")
    obj, removed = await registry.delete(ns, "held", KEEP, WRITE)
    assert not removed
    meta = obj["metadata"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["deletionTimestamp"])
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == created["metadata"]["generation"] + 1
    assert meta["finalizers"] == [FINALIZER]
    assert await registry.get(ns, "held") == obj


async def test_deleting_an_object_already_being_deleted_changes_nothing(registry: Registry, ns: str) -> None:
    await create(registry, ns, "twice")
    first, _ = await registry.delete(ns, "twice", KEEP, WRITE)
    second, removed = await registry.delete(ns, "twice", KEEP, WRITE)
    assert not removed
    assert second == first
    assert await registry.get(ns, "twice") == first


async def test_an_update_cannot_clear_or_move_a_deletion_timestamp(registry: Registry, ns: str) -> None:
    await create(registry, ns, "marked")
    marked, _ = await registry.delete(ns, "marked", KEEP, WRITE)
    sent = await registry.get(ns, "marked")
    del sent["metadata"]["deletionTimestamp"]
    sent["metadata"]["deletionGracePeriodSeconds"] = 30
    sent["metadata"]["labels"] = {"still": "here"}
    updated = (await registry.update(ns, "marked", sent, WRITE)).obj
    assert updated["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    assert updated["metadata"]["deletionGracePeriodSeconds"] == 0
    assert updated["metadata"]["labels"] == {"still": "here"}


async def test_a_resource_version_on_create_is_refused_as_kube_refuses_it(registry: Registry, ns: str) -> None:
    e = await api_error(registry.create(ns, body("withrv", ns, resourceVersion="42"), WRITE))
    assert (e.code, e.message) == (400, "resourceVersion should not be set on objects to be created")
    created = await registry.create(ns, body("withrv", ns, resourceVersion="42"), DRY_RUN)  # storage is not reached
    assert created.created


async def test_adding_a_finalizer_to_an_object_being_deleted_is_unprocessable(registry: Registry, ns: str) -> None:
    await create(registry, ns, "closing")
    await registry.delete(ns, "closing", KEEP, WRITE)
    sent = await registry.get(ns, "closing")
    sent["metadata"]["finalizers"].append(TEST_FINALIZER)
    e = await api_error(registry.update(ns, "closing", sent, WRITE))
    assert (e.code, e.reason) == (422, "Invalid")
    assert e.causes[0].field == "metadata.finalizers"
    assert e.causes[0].message == ("Forbidden: no new finalizers can be added if the object is being deleted, "
                                   f'found new finalizers []string{{"{TEST_FINALIZER}"}}')
    assert (await registry.get(ns, "closing"))["metadata"]["finalizers"] == [FINALIZER]


async def test_removing_one_of_two_finalizers_keeps_the_object_being_deleted(registry: Registry, ns: str) -> None:
    await create(registry, ns, "two", finalizers=[TEST_FINALIZER])
    await registry.delete(ns, "two", KEEP, WRITE)
    sent = await registry.get(ns, "two")
    sent["metadata"]["finalizers"] = [TEST_FINALIZER]
    await registry.update(ns, "two", sent, WRITE)
    assert (await registry.get(ns, "two"))["metadata"]["finalizers"] == [TEST_FINALIZER]


async def test_removing_the_last_finalizer_of_an_object_being_deleted_removes_it(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    await create(registry, ns, "released")
    await registry.delete(ns, "released", KEEP, WRITE)
    await release(registry, ns, "released")
    e = await api_error(registry.get(ns, "released"))
    assert (e.code, e.reason) == (404, "NotFound")
    assert await stored(etcd_store, ns, "released") is None


async def test_removing_every_finalizer_of_a_live_object_keeps_it_and_then_delete_removes_it_at_once(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    await create(registry, ns, "bare")
    released = await release(registry, ns, "bare")
    assert released["metadata"]["finalizers"] == []
    last, removed = await registry.delete(ns, "bare", KEEP, WRITE)
    assert removed
    assert last["metadata"]["uid"] == released["metadata"]["uid"]
    assert await stored(etcd_store, ns, "bare") is None


# -- delete preconditions ------------------------------------------------------------------------


async def test_a_delete_whose_uid_precondition_does_not_match_is_a_conflict(registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "uidpre")
    e = await api_error(registry.delete(ns, "uidpre", DeleteOptions(uid="not-the-uid"), WRITE))
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message == ('Operation cannot be fulfilled on VirtualCluster.kosmos.io "uidpre": the UID in the '
                         f"precondition (not-the-uid) does not match the UID in record ({created['metadata']['uid']}). "
                         "The object might have been deleted and then recreated")
    assert "deletionTimestamp" not in (await registry.get(ns, "uidpre"))["metadata"]


async def test_a_delete_whose_resource_version_precondition_does_not_match_is_a_conflict(
        registry: Registry, ns: str) -> None:
    created = await create(registry, ns, "rvpre")
    rv = created["metadata"]["resourceVersion"]
    e = await api_error(registry.delete(ns, "rvpre", DeleteOptions(resource_version="1"), WRITE))
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message == ('Operation cannot be fulfilled on VirtualCluster.kosmos.io "rvpre": the ResourceVersion in '
                         f"the precondition (1) does not match the ResourceVersion in record ({rv}). The object might "
                         "have been modified")
    assert (await registry.get(ns, "rvpre"))["metadata"]["resourceVersion"] == rv


async def test_a_delete_whose_preconditions_match_goes_ahead(registry: Registry, etcd_store: Store, ns: str) -> None:
    await create(registry, ns, "match")
    current = await release(registry, ns, "match")
    options = DeleteOptions(uid=current["metadata"]["uid"], resource_version=current["metadata"]["resourceVersion"])
    _, removed = await registry.delete(ns, "match", options, WRITE)
    assert removed
    assert await stored(etcd_store, ns, "match") is None


# -- dry-run -----------------------------------------------------------------------------------


async def test_a_dry_run_create_returns_the_object_it_would_create_and_stores_nothing(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    would = (await registry.create(ns, body("dry", ns, nodes(1)), DRY_RUN)).obj
    assert would["metadata"]["name"] == "dry"
    assert would["metadata"]["uid"]
    assert would["metadata"]["finalizers"] == [FINALIZER]
    assert would["spec"] == nodes(1)
    assert await stored(etcd_store, ns, "dry") is None
    assert (await registry.list(ns, ListOptions())).entries == []


async def test_a_dry_run_create_of_a_name_the_cache_has_seen_taken_is_already_exists(
        registry: Registry, ns: str) -> None:
    await create(registry, ns, "taken")
    await registry.list(ns, ListOptions())  # a consistent list: the cache has caught up with the create
    e = await api_error(registry.create(ns, body("taken", ns), DRY_RUN))
    assert (e.code, e.reason) == (409, "AlreadyExists")


async def test_a_dry_run_create_right_after_a_create_of_the_name_is_already_exists(
        registry: Registry, ns: str) -> None:
    for i in range(20):  # one stale answer is enough to show it; most are stale on an idle machine
        await create(registry, ns, f"just-{i}")
        e = await api_error(registry.create(ns, body(f"just-{i}", ns), DRY_RUN))
        assert (e.code, e.reason) == (409, "AlreadyExists")


async def test_a_dry_run_update_returns_the_update_and_stores_nothing(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    created = (await registry.create(ns, body("dryup", ns, nodes(1)), WRITE)).obj
    sent = await registry.get(ns, "dryup")
    sent["spec"] = nodes(3)
    would = (await registry.update(ns, "dryup", sent, DRY_RUN)).obj
    assert would["spec"] == nodes(3)
    assert would["metadata"]["generation"] == 2
    assert would["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert await stored(etcd_store, ns, "dryup") == created


async def test_a_dry_run_update_is_checked_as_a_real_one(registry: Registry, ns: str) -> None:
    await registry.create(ns, body("drycheck", ns, {"externalIP": "10.0.0.1"}), WRITE)
    sent = await registry.get(ns, "drycheck")
    sent["spec"]["externalIP"] = "10.0.0.2"
    assert (await api_error(registry.update(ns, "drycheck", sent, DRY_RUN))).code == 422
    sent["metadata"]["resourceVersion"] = "1"
    assert (await api_error(registry.update(ns, "drycheck", sent, DRY_RUN))).code == 409


async def test_a_dry_run_delete_of_an_object_with_a_finalizer_returns_it_marked_and_stores_nothing(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    created = await create(registry, ns, "drydel")
    would, removed = await registry.delete(ns, "drydel", KEEP, DRY_RUN)
    assert not removed
    assert would["metadata"]["deletionTimestamp"]
    assert await stored(etcd_store, ns, "drydel") == created


async def test_a_dry_run_delete_of_an_object_without_finalizers_returns_it_and_stores_nothing(
        registry: Registry, etcd_store: Store, ns: str) -> None:
    await create(registry, ns, "drygone")
    released = await release(registry, ns, "drygone")
    would, removed = await registry.delete(ns, "drygone", KEEP, DRY_RUN)
    assert removed
    assert would == released
    assert await stored(etcd_store, ns, "drygone") == released


async def test_a_dry_run_delete_checks_preconditions(registry: Registry, ns: str) -> None:
    await create(registry, ns, "drypre")
    e = await api_error(registry.delete(ns, "drypre", DeleteOptions(uid="not-the-uid"), DRY_RUN))
    assert (e.code, e.reason) == (409, "Conflict")
    assert "does not match the UID in record" in e.message


# -- lists: paging and selectors ---------------------------------------------------------------


async def test_pages_joined_by_continue_tokens_give_every_object_once(registry: Registry, ns: str) -> None:
    names = [f"p{i:02}" for i in range(11)]
    for name in names:
        await create(registry, ns, name)
    seen: list[str] = []
    remaining: list[int | None] = []
    token = ""
    while True:
        page = await registry.list(ns, ListOptions(limit=4, continue_token=token))
        assert len(page.entries) <= 4
        seen += [e.name for e in page.entries]
        token = page.continue_token
        if not token:
            break
        remaining.append(page.list_meta()["remainingItemCount"])
    assert seen == names
    assert remaining == [7, 3]


async def test_a_filtered_page_has_no_remaining_item_count(registry: Registry, ns: str) -> None:
    for i in range(5):
        await create(registry, ns, f"f{i}", labels={"team": "a"})
    page = await registry.list(ns, ListOptions(label_selector=parse_label_selector("team=a"), limit=2))
    assert [e.name for e in page.entries] == ["f0", "f1"]
    assert page.continue_token
    assert "remainingItemCount" not in page.list_meta()


async def test_a_list_is_filtered_by_label_selectors(registry: Registry, ns: str) -> None:
    await create(registry, ns, "a1", labels={"team": "a", "tier": "gold"})
    await create(registry, ns, "a2", labels={"team": "a"})
    await create(registry, ns, "b1", labels={"team": "b"})
    await create(registry, ns, "none")

    async def names(selector: str) -> list[str]:
        listed = await registry.list(ns, ListOptions(label_selector=parse_label_selector(selector)))
        return [e.name for e in listed.entries]
    assert await names("team=a") == ["a1", "a2"]
    assert await names("team!=a") == ["b1", "none"]
    assert await names("team in (a,b),!tier") == ["a2", "b1"]
    assert await names("tier") == ["a1"]


async def test_a_list_is_filtered_by_field_selectors(registry: Registry, ns: str) -> None:
    await create(registry, ns, "x")
    await create(registry, ns, "y")
    listed = await registry.list(ns, ListOptions(field_selector=parse_field_selector("metadata.name=y")))
    assert [e.name for e in listed.entries] == ["y"]
    listed = await registry.list(ns, ListOptions(field_selector=parse_field_selector("metadata.name!=y")))
    assert [e.name for e in listed.entries] == ["x"]
    listed = await registry.list(None, ListOptions(field_selector=parse_field_selector(f"metadata.namespace={ns}")))
    assert sorted(e.name for e in listed.entries) == ["x", "y"]


async def test_a_namespaced_list_sees_only_its_namespace(registry: Registry, ns: str) -> None:
    await create(registry, ns, "mine")
    await create(registry, f"{ns}-other", "theirs")
    assert [e.name for e in (await registry.list(ns, ListOptions())).entries] == ["mine"]


# -- watch filtering -----------------------------------------------------------------------------


async def next_event(watcher: Watcher) -> tuple[str, str, dict[str, str]]:
    ev = await asyncio.wait_for(watcher.queue.get(), 5)
    assert ev is not None and ev.entry is not None
    return ev.type, ev.entry.name, ev.entry.labels


async def relabel(registry: Registry, ns: str, name: str, **labels: str) -> None:
    current = await registry.get(ns, name)
    current["metadata"]["labels"] = labels
    await registry.update(ns, name, current, WRITE)


async def test_a_label_selected_watch_sees_objects_move_in_and_out_of_the_selection(
        registry: Registry, ns: str) -> None:
    watcher, backlog, _ = await registry.watch(ns, ListOptions(label_selector=parse_label_selector("team=a")),
                                               bookmarks=False, send_initial_events=None)
    try:
        assert backlog == []
        await create(registry, ns, "other", labels={"team": "b"})  # never selected: never seen
        await create(registry, ns, "mover", labels={"team": "a"})
        assert await next_event(watcher) == (ADDED, "mover", {"team": "a"})
        await relabel(registry, ns, "mover", team="a", size="big")
        assert await next_event(watcher) == (MODIFIED, "mover", {"team": "a", "size": "big"})
        await relabel(registry, ns, "mover", team="b")  # leaves as the state the selector last matched, as in kube
        assert await next_event(watcher) == (DELETED, "mover", {"team": "a", "size": "big"})
        await relabel(registry, ns, "other", team="b", size="big")
        await relabel(registry, ns, "mover", team="a")
        assert await next_event(watcher) == (ADDED, "mover", {"team": "a"})
        await registry.delete(ns, "mover", KEEP, WRITE)
        assert await next_event(watcher) == (MODIFIED, "mover", {"team": "a"})
        await release(registry, ns, "mover")
        assert await next_event(watcher) == (DELETED, "mover", {"team": "a"})
        await registry.delete(ns, "other", KEEP, WRITE)
        await create(registry, ns, "last", labels={"team": "a"})
        assert await next_event(watcher) == (ADDED, "last", {"team": "a"})
        assert watcher.queue.empty()
    finally:
        watcher.stop()


async def test_a_watch_starts_with_the_selected_objects_when_no_resource_version_is_given(
        registry: Registry, ns: str) -> None:
    await create(registry, ns, "in1", labels={"team": "a"})
    await create(registry, ns, "out", labels={"team": "b"})
    await create(registry, ns, "in2", labels={"team": "a"})
    # A watch without a resourceVersion starts from whatever the cache holds (as kube's does unless
    # WatchFromStorageWithoutResourceVersion is on): a consistent list first makes that the writes above.
    await registry.list(ns, ListOptions())
    watcher, backlog, initial_rv = await registry.watch(
        ns, ListOptions(label_selector=parse_label_selector("team=a")), bookmarks=False, send_initial_events=None)
    try:
        assert [(ev.type, ev.entry.name) for ev in backlog if ev.entry] == [(ADDED, "in1"), (ADDED, "in2")]
        assert initial_rv is not None and initial_rv >= max(ev.rv for ev in backlog)
    finally:
        watcher.stop()


async def test_a_field_selected_watch_sees_only_the_named_object(registry: Registry, ns: str) -> None:
    watcher, _, _ = await registry.watch(ns, ListOptions(field_selector=parse_field_selector("metadata.name=one")),
                                         bookmarks=False, send_initial_events=None)
    try:
        await create(registry, ns, "another")
        await create(registry, ns, "one")
        assert await next_event(watcher) == (ADDED, "one", {})
        await relabel(registry, ns, "another", seen="no")
        await relabel(registry, ns, "one", seen="yes")
        assert await next_event(watcher) == (MODIFIED, "one", {"seen": "yes"})
        assert watcher.queue.empty()
    finally:
        watcher.stop()


async def test_a_dry_run_write_is_never_seen_by_a_watcher(registry: Registry, ns: str) -> None:
    watcher, _, _ = await registry.watch(ns, ListOptions(), bookmarks=False, send_initial_events=None)
    try:
        await registry.create(ns, body("ghost", ns), DRY_RUN)
        await create(registry, ns, "real")
        assert await next_event(watcher) == (ADDED, "real", {})
        sent = await registry.get(ns, "real")
        sent["metadata"]["labels"] = {"dry": "yes"}
        await registry.update(ns, "real", sent, DRY_RUN)
        await registry.delete(ns, "real", KEEP, DRY_RUN)
        await relabel(registry, ns, "real", wet="yes")
        assert await next_event(watcher) == (MODIFIED, "real", {"wet": "yes"})
        assert watcher.queue.empty()
    finally:
        watcher.stop()


# -- storage errors as a client sees them --------------------------------------------------------


async def test_getting_a_missing_object_is_not_found(registry: Registry, ns: str) -> None:
    e = await api_error(registry.get(ns, "nothing"))
    assert (e.code, e.reason) == (404, "NotFound")
    assert e.message == 'virtualclusters.kosmos.io "nothing" not found'
    assert (e.name, e.group, e.kind) == ("nothing", "kosmos.io", "virtualclusters")


async def test_updating_or_deleting_a_missing_object_is_not_found(registry: Registry, ns: str) -> None:
    e = await api_error(registry.update(ns, "nothing", body("nothing", ns, resourceVersion="5"), WRITE))
    assert (e.code, e.reason) == (404, "NotFound")
    e = await api_error(registry.delete(ns, "nothing", KEEP, WRITE))
    assert (e.code, e.reason) == (404, "NotFound")
    e = await api_error(registry.delete(ns, "nothing", KEEP, DRY_RUN))
    assert (e.code, e.reason) == (404, "NotFound")


async def test_creating_a_taken_name_is_already_exists_and_keeps_the_first(registry: Registry, ns: str) -> None:
    first = await create(registry, ns, "dup", labels={"first": "yes"})
    e = await api_error(registry.create(ns, body("dup", ns, labels={"first": "no"}), WRITE))
    assert (e.code, e.reason) == (409, "AlreadyExists")
    assert e.message == 'virtualclusters.kosmos.io "dup" already exists'
    assert await registry.get(ns, "dup") == first


async def test_delete_collection_deletes_only_the_selected_objects(registry: Registry, ns: str) -> None:
    for name, team in (("c1", "a"), ("c2", "a"), ("c3", "b")):
        await create(registry, ns, name, labels={"team": team})
        await release(registry, ns, name)
    deleted, _ = await registry.delete_collection(ns, ListOptions(label_selector=parse_label_selector("team=a")),
                                                  KEEP, WRITE)
    assert sorted(o["metadata"]["name"] for o in deleted) == ["c1", "c2"]
    assert [e.name for e in (await registry.list(ns, ListOptions())).entries] == ["c3"]
