"""What a host pod's status says: a failure or a start still under way."""

from __future__ import annotations

import datetime as dt

from reconciler.runtime.podstatus import pod_problem

NOT_FOUND = 'persistentvolumeclaim "data-broken-etcd-0" not found'


def unschedulable(seconds_ago: float, message: str = NOT_FOUND) -> dict:
    stamp = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
         "lastTransitionTime": stamp}]}}


def test_an_unschedulable_pod_is_failing_at_once_without_a_grace() -> None:
    problem, failing = pod_problem(unschedulable(1))
    assert failing
    assert problem == f"unschedulable: {NOT_FOUND}"


def test_an_unschedulable_pod_within_the_grace_is_still_starting() -> None:
    problem, failing = pod_problem(unschedulable(2), unschedulable_grace=20)
    assert not failing
    assert problem.startswith("unschedulable: ")


def test_an_unschedulable_pod_past_the_grace_is_failing() -> None:
    assert pod_problem(unschedulable(25), unschedulable_grace=20)[1]


def test_a_container_that_cannot_pull_its_image_is_failing_whatever_the_grace() -> None:
    pod = {"spec": {"nodeName": "n1"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "backup", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    assert pod_problem(pod, unschedulable_grace=20) == ("ImagePullBackOff", True)


def test_a_pod_waiting_for_the_scheduler_is_not_failing() -> None:
    assert pod_problem({"spec": {}, "status": {"phase": "Pending"}}) == ("not scheduled to a node", False)
