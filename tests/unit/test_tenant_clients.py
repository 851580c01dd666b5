"""Each tenant's admin client is kept between passes, and made again when what it connects with changes."""

from __future__ import annotations

import pytest

from certs import pki
from certs.tenant import TenantPki
from reconciler.tenantapi import TenantClients


def tenant_pki() -> TenantPki:
    ca = pki.new_ca("kubernetes")
    admin = pki.new_leaf(ca, "kubernetes-admin", organizations=("system:masters",))
    return TenantPki({"ca.crt": ca.cert_pem, "ca.key": ca.key_pem, "admin.crt": admin.cert_pem,
                      "admin.key": admin.key_pem})


@pytest.fixture
async def clients() -> TenantClients:
    held = TenantClients()
    yield held
    await held.close()


async def test_the_same_tenant_at_the_same_endpoint_gets_the_same_client(clients: TenantClients) -> None:
    creds = tenant_pki()
    first = await clients.get("team", "dev", creds, "https://127.0.0.1:30001")
    assert await clients.get("team", "dev", creds, "https://127.0.0.1:30001") is first
    assert first.server == "https://127.0.0.1:30001"


async def test_a_new_endpoint_or_a_new_pki_gets_a_new_client(clients: TenantClients) -> None:
    creds = tenant_pki()
    first = await clients.get("team", "dev", creds, "https://127.0.0.1:30001")
    moved = await clients.get("team", "dev", creds, "https://127.0.0.1:30002")
    assert moved is not first and moved.server == "https://127.0.0.1:30002"
    renewed = await clients.get("team", "dev", tenant_pki(), "https://127.0.0.1:30002")
    assert renewed is not moved


async def test_tenants_do_not_share_a_client_and_a_forgotten_one_is_made_again(clients: TenantClients) -> None:
    creds = tenant_pki()
    dev = await clients.get("team", "dev", creds, "https://127.0.0.1:30001")
    prod = await clients.get("team", "prod", creds, "https://127.0.0.1:30001")
    assert prod is not dev
    await clients.forget("team", "dev")
    assert await clients.get("team", "dev", creds, "https://127.0.0.1:30001") is not dev
    assert await clients.get("team", "prod", creds, "https://127.0.0.1:30001") is prod
