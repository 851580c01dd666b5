"""What a write needs beyond its verb: restoring is get on the source's virtualclusters/snapshots,
promoting host nodes is create on the VirtualCluster's virtualclusters/promote."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.auth.authn import Attributes, UserInfo
from apiserver.machinery import errors
from apiserver.registry.admission import AdmissionRequest, PromoteAuthorization, RestoreAuthorization


class Recorder:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.asked: list[tuple[UserInfo, Attributes]] = []

    async def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        self.asked.append((user, attrs))
        return self.allow, ""


def vc(name: str = "copy", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": spec}


def create(obj: dict[str, Any], user: UserInfo | None) -> AdmissionRequest:
    return AdmissionRequest(VIRTUALCLUSTERS, obj, None, user)


def update(old: dict[str, Any], new: dict[str, Any], user: UserInfo | None) -> AdmissionRequest:
    return AdmissionRequest(VIRTUALCLUSTERS, new, old, user)


SOURCE = {"virtualCluster": "prod", "snapshot": "prod-20261125-114000"}
CAROL = UserInfo("carol", ("system:authenticated",))


async def test_the_creator_is_asked_about_get_on_the_sources_snapshots() -> None:
    authorizer = Recorder(allow=True)
    await RestoreAuthorization(authorizer).admit(create(vc(restoreFrom=SOURCE), CAROL))
    [(user, attrs)] = authorizer.asked
    assert user == CAROL
    assert attrs == Attributes(verb="get", path="/apis/kosmos.io/v1alpha1/namespaces/team-a/virtualclusters/prod/"
                                               "snapshots", resource_request=True, namespace="team-a",
                               group="kosmos.io", version="v1alpha1", resource="virtualclusters",
                               subresource="snapshots", name="prod")


async def test_a_denied_restore_is_a_403_worded_as_kube_words_it() -> None:
    with pytest.raises(errors.ApiError) as denied:
        await RestoreAuthorization(Recorder(allow=False)).admit(create(vc(restoreFrom=SOURCE), CAROL))
    status = denied.value.status()
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert status["message"] == ('virtualclusters.kosmos.io "copy" is forbidden: User "carol" cannot get resource '
                                 '"virtualclusters/snapshots" in API group "kosmos.io" in the namespace "team-a"')
    assert status["details"] == {"name": "copy", "group": "kosmos.io", "kind": "virtualclusters"}


async def test_nothing_is_asked_without_restore_from_or_for_the_servers_own_writes() -> None:
    authorizer = Recorder(allow=False)
    admission = RestoreAuthorization(authorizer)
    await admission.admit(create(vc(), CAROL))
    await admission.admit(create(vc(restoreFrom=SOURCE), None))
    assert authorizer.asked == []


@pytest.mark.parametrize("spec", [
    {"promotePolicies": [{"nodeCount": 2}]},
    {"promoteResources": {"nodes": ["node-1"]}},
    {"promoteResources": {"nodeInfos": [{"nodeName": "node-1"}]}},
    {"promoteResources": {"resources": {"cpu": "4"}, "resourcesMode": "Dedicated"}},
])
async def test_a_create_that_promotes_in_any_form_asks_for_create_on_the_clusters_promote(spec: Any) -> None:
    authorizer = Recorder(allow=True)
    await PromoteAuthorization(authorizer).admit(create(vc("dev", **spec), CAROL))
    [(_, attrs)] = authorizer.asked
    assert attrs == Attributes(verb="create", path="/apis/kosmos.io/v1alpha1/namespaces/team-a/virtualclusters/dev/"
                                                  "promote", resource_request=True, namespace="team-a",
                               group="kosmos.io", version="v1alpha1", resource="virtualclusters",
                               subresource="promote", name="dev")


async def test_a_denied_promotion_names_the_permission_in_kubes_words() -> None:
    with pytest.raises(errors.ApiError) as denied:
        await PromoteAuthorization(Recorder(allow=False)).admit(create(vc("dev", promotePolicies=[{"nodeCount": 2}]),
                                                                       CAROL))
    assert denied.value.status()["code"] == 403
    assert denied.value.status()["message"] == (
        'virtualclusters.kosmos.io "dev" is forbidden: User "carol" cannot create resource "virtualclusters/promote" '
        'in API group "kosmos.io" in the namespace "team-a"')


async def test_scaling_up_or_naming_a_new_node_asks_and_scaling_down_or_a_slice_does_not() -> None:
    authorizer = Recorder(allow=False)
    admission = PromoteAuthorization(authorizer)
    two = vc("dev", promotePolicies=[{"nodeCount": 2}])
    await admission.admit(update(two, vc("dev", promotePolicies=[{"nodeCount": 1}]), CAROL))  # down
    await admission.admit(update(two, two, CAROL))  # unchanged
    await admission.admit(create(vc("dev", promoteResources={"resources": {"cpu": "2"}}), CAROL))  # a slice
    await admission.admit(update(two, vc("dev", promotePolicies=[{"nodeCount": 5}]), None))  # the server's own
    assert authorizer.asked == []
    for grown in (vc("dev", promotePolicies=[{"nodeCount": 3}]),
                  vc("dev", promotePolicies=[{"nodeCount": 1}], promoteResources={"nodes": ["node-9"]})):
        with pytest.raises(errors.ApiError):
            await admission.admit(update(two, grown, CAROL))
    named = vc("dev", promoteResources={"nodes": ["node-1"]})
    with pytest.raises(errors.ApiError):  # same count, another node
        await admission.admit(update(named, vc("dev", promoteResources={"nodes": ["node-2"]}), CAROL))
    assert len(authorizer.asked) == 3
