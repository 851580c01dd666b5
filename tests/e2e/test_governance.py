"""Governance on a real host: its ResourceQuota caps VirtualClusters and the slices they ask for, as
kube-apiserver caps its own resources, and promoting host nodes needs a permission of its own.

vc-apiserver runs behind a real kube-apiserver and controller-manager (the ``host_stack`` fixture), so
the quotas are the host's, their ``status.hard`` is filled by the host's quota controller, and every
request here goes through the aggregator with the host's RBAC.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hack.stack import Stack
from tests.conftest import Kubectl, vc

pytestmark = pytest.mark.e2e

COUNT = "count/virtualclusters.kosmos.io"
SLICE_CPU = "virtualclusters.kosmos.io/slice-millicpu"
SLICE_MEMORY = "virtualclusters.kosmos.io/slice-memory"
NODES = "virtualclusters.kosmos.io/promoted-nodes"


@pytest.fixture(scope="module")
def k(host_stack: Stack) -> Kubectl:
    return Kubectl(host_stack.kubeconfig, host_namespaces=True)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def quota(k: Kubectl, ns: str, name: str, **hard: str) -> None:
    """A host ResourceQuota, once the host's quota controller has published its limits."""
    k.run("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "ResourceQuota",
                                                 "metadata": {"name": name, "namespace": ns}, "spec": {"hard": hard}}))
    wait_for(f"quota {name}'s status.hard", lambda: set(hard) <= set(
        (k.json("get", "resourcequota", name, "-n", ns).get("status") or {}).get("hard") or {}))


def used(k: Kubectl, ns: str, name: str) -> dict[str, str]:
    return (k.json("get", "resourcequota", name, "-n", ns).get("status") or {}).get("used") or {}


def create(k: Kubectl, obj: dict[str, Any], *args: str) -> Any:
    return k.run("create", "-f", "-", *args, input=json.dumps(obj), check=False)


def slice_of(**resources: str) -> dict[str, Any]:
    return {"promoteResources": {"resources": resources}}


def test_a_count_quota_refuses_the_second_virtualcluster_with_kubes_wording(k: Kubectl) -> None:
    ns = k.ensure_namespace("gov-count")
    quota(k, ns, "vcs", **{COUNT: "1"})
    assert create(k, vc("first", ns)).returncode == 0
    assert used(k, ns, "vcs")[COUNT] == "1"
    refused = create(k, vc("second", ns))
    assert refused.returncode != 0
    assert ('Error from server (Forbidden): error when creating "STDIN": virtualclusters.kosmos.io "second" is '
            f'forbidden: exceeded quota: vcs, requested: {COUNT}=1, used: {COUNT}=1, limited: {COUNT}=1'
            ) in refused.stderr
    applied = k.run("apply", "--server-side", "-f", "-", input=json.dumps(vc("second", ns)), check=False)
    assert "exceeded quota: vcs" in applied.stderr, "a create by apply is counted too"
    dry = create(k, vc("second", ns), "--dry-run=server")
    assert "exceeded quota: vcs" in dry.stderr, "a dry run is checked as the create would be"
    assert k.run("get", "vc", "second", "-n", ns, check=False).returncode != 0
    assert used(k, ns, "vcs")[COUNT] == "1"


def test_a_dry_run_is_checked_but_charges_nothing_and_a_delete_gives_the_unit_back(k: Kubectl) -> None:
    ns = k.ensure_namespace("gov-release")
    quota(k, ns, "vcs", **{COUNT: "1"})
    assert create(k, vc("first", ns), "--dry-run=server").returncode == 0
    assert used(k, ns, "vcs").get(COUNT, "0") == "0"
    assert create(k, vc("first", ns)).returncode == 0
    k.run("delete", "vc", "first", "-n", ns, "--wait")
    wait_for("the quota to be given back", lambda: used(k, ns, "vcs").get(COUNT) == "0", timeout=20)
    assert create(k, vc("again", ns)).returncode == 0
    assert used(k, ns, "vcs")[COUNT] == "1"


def test_concurrent_creates_for_the_last_units_exactly_fill_the_quota(k: Kubectl) -> None:
    ns = k.ensure_namespace("gov-race")
    quota(k, ns, "vcs", **{COUNT: "3"})
    assert create(k, vc("held", ns)).returncode == 0
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: create(k, vc(f"racer-{i}", ns)), range(8)))
    won = [r for r in results if r.returncode == 0]
    lost = [r for r in results if r.returncode != 0]
    assert len(won) == 2, [r.stderr for r in lost]
    assert all("exceeded quota: vcs" in r.stderr for r in lost), [r.stderr for r in lost]
    assert len(k.json("get", "vc", "-n", ns)["items"]) == 3
    assert used(k, ns, "vcs")[COUNT] == "3"


def test_slices_are_capped_by_their_cpu_and_memory_and_a_scale_down_always_passes(k: Kubectl) -> None:
    ns = k.ensure_namespace("gov-slices")
    quota(k, ns, "slices", **{SLICE_CPU: "3k", SLICE_MEMORY: "4Gi"})
    assert create(k, vc("a", ns, slice_of(cpu="2", memory="3Gi"))).returncode == 0
    assert used(k, ns, "slices") == {SLICE_CPU: "2k", SLICE_MEMORY: "3Gi"}
    refused = create(k, vc("b", ns, slice_of(cpu="500m", memory="2Gi")))
    assert (f"exceeded quota: slices, requested: {SLICE_MEMORY}=2Gi, used: {SLICE_MEMORY}=3Gi, "
            f"limited: {SLICE_MEMORY}=4Gi") in refused.stderr
    grow = k.run("patch", "vc", "a", "-n", ns, "--type", "merge", "-p",
                 json.dumps({"spec": slice_of(cpu="4", memory="3Gi")}), check=False)
    assert (f"exceeded quota: slices, requested: {SLICE_CPU}=2k, used: {SLICE_CPU}=2k, limited: {SLICE_CPU}=3k"
            ) in grow.stderr
    assert k.json("get", "vc", "a", "-n", ns)["spec"]["promoteResources"]["resources"]["cpu"] == "2"
    k.run("patch", "vc", "a", "-n", ns, "--type", "merge", "-p", json.dumps({"spec": slice_of(cpu="1", memory="1Gi")}))
    wait_for("the shrunk slice to be recounted",
             lambda: used(k, ns, "slices") == {SLICE_CPU: "1k", SLICE_MEMORY: "1Gi"}, timeout=20)
    assert create(k, vc("b", ns, slice_of(cpu="500m", memory="2Gi"))).returncode == 0
    assert used(k, ns, "slices") == {SLICE_CPU: "1500", SLICE_MEMORY: "3Gi"}


def test_promoting_host_nodes_needs_its_own_permission_which_admin_does_not_carry(k: Kubectl) -> None:
    ns = k.ensure_namespace("gov-promote")
    k.run("create", "rolebinding", "erin-admin", "--clusterrole=admin", "--user=erin", "-n", ns)
    wait_for("admin to carry virtualclusters", lambda: k.run(
        "auth", "can-i", "create", "virtualclusters.kosmos.io", "-n", ns, "--as", "erin",
        check=False).stdout.strip() == "yes")
    assert k.run("auth", "can-i", "create", "virtualclusters.kosmos.io", "--subresource=promote", "-n", ns,
                 "--as", "erin", check=False).stdout.strip() == "no"
    promoting = vc("takes-nodes", ns, {"promotePolicies": [{"nodeCount": 2}]})
    message = ('virtualclusters.kosmos.io "takes-nodes" is forbidden: User "erin" cannot create resource '
               f'"virtualclusters/promote" in API group "kosmos.io" in the namespace "{ns}"')
    assert message in create(k, promoting, "--as", "erin").stderr
    assert message in create(k, promoting, "--as", "erin", "--dry-run=server").stderr
    assert message in k.run("apply", "--server-side", "-f", "-", "--as", "erin", input=json.dumps(promoting),
                            check=False).stderr
    assert create(k, vc("sliced", ns, slice_of(cpu="1", memory="1Gi")), "--as", "erin").returncode == 0
    scale_up = k.run("patch", "vc", "sliced", "-n", ns, "--as", "erin", "--type", "merge", "-p",
                     json.dumps({"spec": {"promoteResources": {"nodes": ["node-000"]}}}), check=False)
    assert 'cannot create resource "virtualclusters/promote"' in scale_up.stderr
    k.run("create", "role", "promoter", "--verb=create", "--resource=virtualclusters.kosmos.io/promote", "-n", ns)
    k.run("create", "rolebinding", "erin-promoter", "--role=promoter", "--user=erin", "-n", ns)
    wait_for("the grant", lambda: create(k, promoting, "--as", "erin", "--dry-run=server").returncode == 0)
    assert create(k, promoting, "--as", "erin").returncode == 0


def test_promoted_nodes_count_against_a_quota_of_their_own(k: Kubectl) -> None:
    ns = k.ensure_namespace("gov-nodes")
    quota(k, ns, "nodes", **{NODES: "2"})
    assert create(k, vc("two", ns, {"promotePolicies": [{"nodeCount": 2}]}), "--dry-run=server").returncode == 0
    refused = create(k, vc("three", ns, {"promotePolicies": [{"nodeCount": 1}],
                                         "promoteResources": {"nodes": ["a", "b"]}}))
    assert f"exceeded quota: nodes, requested: {NODES}=3, used: {NODES}=0, limited: {NODES}=2" in refused.stderr
