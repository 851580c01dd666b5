"""What a host pod's status says: a failure or a start still under way."""

from __future__ import annotations

import datetime as dt

from apiserver.machinery.timefmt import rfc3339
from reconciler.runtime.pods.hostobjects import COMPONENT
from reconciler.runtime.pods.status import UNSCHEDULABLE_GRACE, pod_problem, pods_summary

NOT_FOUND = 'persistentvolumeclaim "data-broken-etcd-0" not found'


def ago(seconds: float) -> str:
    return rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds))


def unschedulable(seconds_ago: float, message: str = NOT_FOUND) -> dict:
    stamp = ago(seconds_ago)
    return {"spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
         "lastTransitionTime": stamp}]}}


def test_an_unschedulable_pod_within_the_grace_is_still_starting() -> None:
    problem, failing = pod_problem(unschedulable(2))
    assert not failing
    assert problem == f"unschedulable: {NOT_FOUND}"


def test_an_unschedulable_pod_past_the_grace_is_failing() -> None:
    assert pod_problem(unschedulable(UNSCHEDULABLE_GRACE + 5))[1]


def test_an_unschedulable_condition_without_a_transition_time_counts_from_the_pods_creation() -> None:
    pod = unschedulable(0)
    del pod["status"]["conditions"][0]["lastTransitionTime"]
    assert not pod_problem({**pod, "metadata": {"creationTimestamp": ago(2)}})[1]
    assert pod_problem({**pod, "metadata": {"creationTimestamp": ago(UNSCHEDULABLE_GRACE + 5)}})[1]


def test_without_a_grace_an_unschedulable_pod_is_failing_at_once() -> None:
    assert pod_problem(unschedulable(1), unschedulable_grace=0)[1]


def test_the_host_pods_of_a_tenant_whose_etcd_waits_for_its_claim_are_starting_then_failing() -> None:
    apiserver = {"metadata": {"labels": {COMPONENT: "apiserver"}}, "status": {"phase": "Running"}}
    etcd = {"metadata": {"name": "alpha-etcd-0", "labels": {COMPONENT: "etcd"}}}
    assert pods_summary([apiserver, {**etcd, **unschedulable(1)}])[0] == "Starting"
    reason, summary = pods_summary([apiserver, {**etcd, **unschedulable(UNSCHEDULABLE_GRACE + 5)}])
    assert reason == "ComponentFailing"
    assert f"etcd 0/1 pods running (alpha-etcd-0: unschedulable: {NOT_FOUND})" in summary


def test_a_container_that_cannot_pull_its_image_is_failing_whatever_the_grace() -> None:
    pod = {"spec": {"nodeName": "n1"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "backup", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    assert pod_problem(pod) == ("ImagePullBackOff", True)


def test_a_pod_waiting_for_the_scheduler_is_not_failing() -> None:
    assert pod_problem({"spec": {}, "status": {"phase": "Pending"}}) == ("not scheduled to a node", False)
