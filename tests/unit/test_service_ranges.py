"""Services ranges of their own for tenants on a shared slice: blocks of a pool, one per tenant."""

from __future__ import annotations

import ipaddress

import pytest

from certs import tenant as tenantpki
from reconciler.shared import ranges


def test_a_pool_is_cut_into_blocks_that_never_overlap_and_each_uid_starts_somewhere_else() -> None:
    pool = ranges.Pool("10.112.0.0/12", 22)
    assert pool.size == 1024
    blocks = pool.candidates("uid-a")
    assert len(set(blocks)) == 1024
    nets = sorted(ipaddress.ip_network(b) for b in blocks)
    assert all(not a.overlaps(b) for a, b in zip(nets, nets[1:], strict=False))
    assert all(n.subnet_of(ipaddress.ip_network("10.112.0.0/12")) for n in nets)
    assert pool.candidates("uid-a") == blocks and pool.candidates("uid-b")[0] != blocks[0]


@pytest.mark.parametrize(("cidr", "prefix"), [("10.112.0.0/12", 8), ("10.112.0.0/12", 31), ("not-a-cidr", 22)])
def test_a_block_that_does_not_fit_its_pool_is_refused(cidr: str, prefix: int) -> None:
    with pytest.raises(ValueError):
        ranges.Pool(cidr, prefix)


def test_the_kubernetes_and_dns_services_take_the_first_and_tenth_addresses() -> None:
    assert ranges.first_address("10.112.4.0/22") == "10.112.4.1"
    assert ranges.dns_address("10.112.4.0/22") == "10.112.4.10"
    assert ranges.object_name("10.112.4.0/22") == "vc-10-112-4-0-22"


def test_the_pki_keeps_its_range_through_a_renewal_and_an_old_pki_keeps_the_shared_one() -> None:
    made = tenantpki.generate(["127.0.0.1"], service_cidr="10.112.4.0/22")
    assert made.service_cidr == "10.112.4.0/22"
    assert tenantpki.generate(["127.0.0.1", "10.0.0.9"], made, service_cidr="10.113.0.0/22").service_cidr == \
        "10.112.4.0/22"
    old = tenantpki.generate(["127.0.0.1"])
    assert old.service_cidr == tenantpki.SHARED_SERVICE_CIDR
    assert tenantpki.generate(["127.0.0.1"], old).service_cidr == tenantpki.SHARED_SERVICE_CIDR
