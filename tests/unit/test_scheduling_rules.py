"""When a tenant's scheduler is wanted without asking the tenant: the spec's compute, and what was started."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.apis.compute import asks_for_compute
from reconciler.runtime.scheduling import Scheduling, was_ready


@pytest.mark.parametrize(("spec", "asks"), [
    (None, False),
    ({}, False),
    ({"promotePolicies": [{"nodeCount": 0}]}, False),
    ({"promotePolicies": [{"nodeCount": 2}]}, True),
    ({"promoteResources": {"nodes": ["node-1"]}}, True),
    ({"promoteResources": {"nodeInfos": [{"nodeName": "node-1"}]}}, True),
    ({"promoteResources": {"resources": {"cpu": "2", "memory": "4Gi"}}}, True),  # a shared slice
    ({"promoteResources": {"resources": {"cpu": "8"}, "resourcesMode": "Dedicated"}}, True),
    ({"promoteResources": {"resources": {}}}, False),
    ({"externalIP": "10.0.0.1", "backup": {"schedule": "@daily", "keep": 2}}, False),
])
def test_compute_in_the_spec_is_promoted_nodes_or_a_slice(spec: dict[str, Any] | None, asks: bool) -> None:
    assert asks_for_compute(spec) is asks


def test_a_started_scheduler_stays_known_until_the_tenant_is_forgotten() -> None:
    scheduling, tenant = Scheduling(), ("ns", "t")
    bare = {"spec": {}}
    assert not scheduling.known(tenant, bare)
    scheduling.start(tenant)
    assert scheduling.known(tenant, bare), "the work being gone does not stop it"
    scheduling.forget(tenant)
    assert not scheduling.known(tenant, bare), "a tenant that stopped starts without one"


def test_a_spec_that_asks_for_compute_keeps_the_scheduler_when_it_stops_asking() -> None:
    scheduling, tenant = Scheduling(), ("ns", "t")
    assert scheduling.known(tenant, {"spec": {"promotePolicies": [{"nodeCount": 1}]}})
    assert scheduling.known(tenant, {"spec": {"promotePolicies": [{"nodeCount": 0}]}})
    scheduling.clear()
    assert not scheduling.known(tenant, {"spec": {"promotePolicies": [{"nodeCount": 0}]}})


@pytest.mark.parametrize(("conditions", "ready"), [
    (None, False),
    ([{"type": "ControlPlaneReady", "status": "False"}], False),
    ([{"type": "Ready", "status": "True"}], False),
    ([{"type": "ControlPlaneReady", "status": "True"}], True),
])
def test_only_a_control_plane_last_seen_ready_is_asked_before_its_scheduler_is_applied(
        conditions: list[dict[str, str]] | None, ready: bool) -> None:
    assert was_ready({"status": {"conditions": conditions}} if conditions is not None else {}) is ready
