"""The sweep of credentials that open nothing any more, in-process against a real etcd: one past its
expiry and one whose VirtualCluster is gone are deleted; one still valid for an existing cluster stays."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator

import pytest

from apiserver.apis.credential import new_credential
from apiserver.apis.resource import VIRTUALCLUSTERCREDENTIALS, VIRTUALCLUSTERS
from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.machinery.timefmt import rfc3339
from apiserver.registry.credential import CredentialSweeper, new_registry
from apiserver.registry.rest import ListOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster import VirtualClusterStrategy
from apiserver.storage.etcd3 import Store
from hack.harness import Etcd
from tests.conftest import start_etcd, vc


@pytest.fixture(scope="module")
def own_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = start_etcd(tmp_path_factory.mktemp("sweep"), "etcd")
    yield server
    server.stop()


@pytest.fixture
async def registries(own_etcd: Etcd) -> AsyncIterator[tuple[Registry, Registry]]:
    client = EtcdClient(EtcdConfig([own_etcd.url], request_timeout=2.0))
    await client.start()
    yield (new_registry(Store(client, VIRTUALCLUSTERCREDENTIALS)),
           Registry(Store(client, VIRTUALCLUSTERS), VirtualClusterStrategy()))
    await client.close()


async def test_expired_credentials_and_those_of_deleted_clusters_are_swept_and_no_other(
        registries: tuple[Registry, Registry]) -> None:
    credentials, clusters = registries
    await clusters.create("sweep", vc("dev", "sweep"), WriteOptions())
    now = dt.datetime.now(dt.UTC)
    later, earlier = rfc3339(now + dt.timedelta(hours=1)), rfc3339(now - dt.timedelta(seconds=1))

    async def issue(cluster: str, expires: str) -> str:
        made = await credentials.create("sweep", new_credential("sweep", cluster, "alice", "", [], {}, expires),
                                        WriteOptions())
        return str(made.obj["metadata"]["name"])

    valid, expired, orphaned = await issue("dev", later), await issue("dev", earlier), await issue("gone", later)
    swept = await CredentialSweeper(credentials, clusters).sweep(now)
    assert sorted(swept) == sorted([f"sweep/{expired}", f"sweep/{orphaned}"])
    left = [e.name for e in (await credentials.list("sweep", ListOptions())).entries]
    assert left == [valid]
