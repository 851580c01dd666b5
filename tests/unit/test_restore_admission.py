"""Restoring a snapshot is authorized as get on the source's virtualclusters/snapshots."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.auth.authn import Attributes, UserInfo
from apiserver.machinery import errors
from apiserver.registry.admission import RestoreAuthorization


class Recorder:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.asked: list[tuple[UserInfo, Attributes]] = []

    async def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        self.asked.append((user, attrs))
        return self.allow, ""


def clone(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "copy", "namespace": "team-a"}, "spec": spec}


SOURCE = {"virtualCluster": "prod", "snapshot": "prod-20261125-114000"}
CAROL = UserInfo("carol", ("system:authenticated",))


async def test_the_creator_is_asked_about_get_on_the_sources_snapshots() -> None:
    authorizer = Recorder(allow=True)
    await RestoreAuthorization(authorizer).admit_create(VIRTUALCLUSTERS, clone(restoreFrom=SOURCE), CAROL)
    [(user, attrs)] = authorizer.asked
    assert user == CAROL
    assert attrs == Attributes(verb="get", path="/apis/kosmos.io/v1alpha1/namespaces/team-a/virtualclusters/prod/"
                                               "snapshots", resource_request=True, namespace="team-a",
                               group="kosmos.io", version="v1alpha1", resource="virtualclusters",
                               subresource="snapshots", name="prod")


async def test_a_denied_restore_is_a_403_worded_as_kube_words_it() -> None:
    with pytest.raises(errors.ApiError) as denied:
        await RestoreAuthorization(Recorder(allow=False)).admit_create(VIRTUALCLUSTERS, clone(restoreFrom=SOURCE),
                                                                       CAROL)
    status = denied.value.status()
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert status["message"] == ('virtualclusters.kosmos.io "copy" is forbidden: User "carol" cannot get resource '
                                 '"virtualclusters/snapshots" in API group "kosmos.io" in the namespace "team-a"')
    assert status["details"] == {"name": "copy", "group": "kosmos.io", "kind": "virtualclusters"}


async def test_nothing_is_asked_without_restore_from_or_for_the_servers_own_writes() -> None:
    authorizer = Recorder(allow=False)
    admission = RestoreAuthorization(authorizer)
    await admission.admit_create(VIRTUALCLUSTERS, clone(), CAROL)
    await admission.admit_create(VIRTUALCLUSTERS, clone(restoreFrom=SOURCE), None)
    assert authorizer.asked == []
