"""Hibernation's pure rules: the spec field (Go durations, validation, defaulting, OpenAPI), when a
cluster should sleep or wake, the status each pass leads to, and the audit log's last user request."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from apiserver.apis import hibernation as sleep
from apiserver.apis import schema
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.endpoints import openapi
from apiserver.machinery.golang import parse_duration
from reconciler.controlplane import inactivity, status
from reconciler.controlplane.inactivity import Hibernation
from reconciler.controlplane.status import Observed, Stopping
from reconciler.runtime import audit
from reconciler.runtime.base import ControlPlaneState, RuntimeFailure

T0 = dt.datetime(2025, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
ENDPOINT = "https://127.0.0.1:20001"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_: str, state: str, reason: str, since: float, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": state, "reason": reason, "message": message, "observedGeneration": 1,
            "lastTransitionTime": stamp(since)}


def running(hibernation: dict[str, Any] | None = None, *, up_since: float = 0, **meta: Any) -> dict[str, Any]:
    """A Completed cluster whose control plane has been ready since ``up_since``."""
    spec: dict[str, Any] = {} if hibernation is None else {"hibernation": hibernation}
    return {"metadata": {"name": "dev", "namespace": "team", "uid": "u1", "generation": 1, **meta}, "spec": spec,
            "status": {"phase": "Completed", "reason": "Ready", "conditions": [
                cond("ControlPlaneReady", "True", "ControlPlaneRunning", up_since),
                cond("NodesReady", "True", "NoNodesRequested", up_since),
                cond("Ready", "True", "Ready", up_since)], "nodes": [],
                "controlPlaneEndpoint": ENDPOINT, "port": 20001}}


def asleep(hibernation: dict[str, Any], reason: str, since: float, phase: str = "Hibernated",
           **meta: Any) -> dict[str, Any]:
    obj = running(hibernation, **meta)
    obj["status"]["phase"] = phase
    obj["status"]["conditions"] = [cond(t, "False", "Hibernated", since) for t in status.CONDITIONS] + [
        cond("Hibernated", "True", reason, since, "no request from a user since ...")]
    return obj


def conditions(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}


# -- the spec field ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "nanoseconds"), [
    ("30m", 30 * 60 * 10**9), ("1h30m", 90 * 60 * 10**9), ("1.5h", 90 * 60 * 10**9), ("90s", 90 * 10**9),
    ("300ms", 300 * 10**6), (".5s", 5 * 10**8), ("0", 0), ("-5s", -5 * 10**9), ("1µs", 1000),
    ("2562047h", 2562047 * 3600 * 10**9),
])
def test_go_durations_parse_as_time_parse_duration_does(text: str, nanoseconds: int) -> None:
    assert parse_duration(text) == nanoseconds


@pytest.mark.parametrize("text", ["", "5", "s", "1d", "1h-1m", ".s", "2562048h", "30 m"])
def test_what_time_parse_duration_refuses_is_refused(text: str) -> None:
    assert parse_duration(text) is None


def test_hibernation_is_validated_with_kube_wording() -> None:
    causes = schema.validate_spec({"hibernation": {"hibernated": "yes", "afterInactivity": "30 minutes",
                                                   "wakeOnAccess": 1}})
    assert [(c.field, c.message) for c in causes] == [
        ("spec.hibernation.hibernated",
         'Invalid value: "string": spec.hibernation.hibernated in body must be of type boolean: "string"'),
        ("spec.hibernation.afterInactivity", 'Invalid value: "30 minutes": spec.hibernation.afterInactivity in '
                                             'body must be of type duration: "30 minutes"'),
        ("spec.hibernation.wakeOnAccess",
         'Invalid value: "integer": spec.hibernation.wakeOnAccess in body must be of type boolean: "integer"')]
    assert {c.type for c in causes} == {"FieldValueTypeInvalid"}
    for value, go_type in ((30, "int64"), (1.5, "float64"), (True, ""), ({"a": 1}, "")):  # as the CRD's format check
        [cause] = schema.validate_spec({"hibernation": {"afterInactivity": value}})
        assert cause.message == (f'Invalid value: "{go_type}": spec.hibernation.afterInactivity in body must be of '
                                 f'type duration: "{go_type}"')
    [zero] = schema.validate_spec({"hibernation": {"afterInactivity": "0s"}})
    assert (zero.field, zero.message) == ("spec.hibernation.afterInactivity",
                                          'Invalid value: "0s": must be a positive duration')
    assert schema.validate_spec({"hibernation": {"hibernated": True, "afterInactivity": "1h30m"}}) == []


def test_wake_on_access_defaults_to_true_where_hibernation_is_given_as_a_structural_schema_defaults() -> None:
    for given in ({}, {"wakeOnAccess": None}, {"hibernated": True}):
        obj = {"spec": {"hibernation": dict(given)}}
        assert schema.prune_unknown_fields(obj) == []
        assert obj["spec"]["hibernation"]["wakeOnAccess"] is True
    kept = {"spec": {"hibernation": {"wakeOnAccess": False}}}
    schema.prune_unknown_fields(kept)
    assert kept["spec"]["hibernation"]["wakeOnAccess"] is False
    without = {"spec": {"promotePolicies": []}}
    schema.prune_unknown_fields(without)
    assert without == {"spec": {"promotePolicies": []}}  # no hibernation object is made up


def test_openapi_publishes_the_hibernation_fields_their_format_and_default() -> None:
    for doc, definitions in ((openapi.openapi_v3(), "components"), (openapi.openapi_v2(), "definitions")):
        defs = doc["components"]["schemas"] if definitions == "components" else doc["definitions"]
        props = defs["io.kosmos.v1alpha1.Hibernation"]["properties"]
        assert props["hibernated"]["type"] == "boolean"
        assert props["afterInactivity"]["type"] == "string" and props["afterInactivity"]["format"] == "duration"
        assert props["wakeOnAccess"]["default"] is True
        assert "hibernation" in defs["io.kosmos.v1alpha1.VirtualClusterSpec"]["properties"]
        phase = defs["io.kosmos.v1alpha1.VirtualClusterStatus"]["properties"]["phase"]
        assert {"Hibernating", "Hibernated", "Waking"} <= set(phase["enum"])


# -- when to sleep and when to wake --------------------------------------------------------------------------------


def test_the_spec_hibernates_whatever_the_activity() -> None:
    obj = running({"hibernated": True, "afterInactivity": "1h"})
    why = inactivity.hibernation(VirtualCluster(obj), at(1), at(1))
    assert why == Hibernation("Hibernated", "spec.hibernation.hibernated is true")


def test_no_hibernation_without_after_inactivity_or_spec() -> None:
    assert inactivity.hibernation(VirtualCluster(running()), at(10**6), None) is None
    assert inactivity.hibernation(VirtualCluster(running({"wakeOnAccess": True})), at(10**6), None) is None


def test_inactivity_counts_from_the_control_plane_start_then_from_the_last_user_request() -> None:
    obj = running({"afterInactivity": "30m"}, up_since=0)
    assert not inactivity.inactivity_due(VirtualCluster(obj), at(1799), None)
    assert inactivity.inactivity_due(VirtualCluster(obj), at(1800), None)
    assert inactivity.hibernation(VirtualCluster(obj), at(1799), None) is None
    why = inactivity.hibernation(VirtualCluster(obj), at(1800), None)
    assert why is not None and why.reason == "Inactive"
    assert why.message == (f"no request from a user since {stamp(0)}, for longer than spec.hibernation.afterInactivity"
                           f" (30m) (fetching its kubeconfig wakes it)")
    # a request at 1000s moves the clock: due at 2800s, not before
    assert inactivity.hibernation(VirtualCluster(obj), at(2799), at(1000)) is None
    assert not inactivity.inactivity_due(VirtualCluster(obj), at(2799), at(1000))
    why = inactivity.hibernation(VirtualCluster(obj), at(2800), at(1000))
    assert why is not None and stamp(1000) in why.message
    # a request older than the control plane's start does not count against it
    restarted = VirtualCluster(running({"afterInactivity": "30m"}, up_since=5000))
    assert inactivity.hibernation(restarted, at(6000), at(10)) is None


def test_a_wake_request_on_a_running_cluster_resets_the_clock() -> None:
    obj = running({"afterInactivity": "30m"}, annotations={sleep.WAKE_ANNOTATION: stamp(1000)})
    assert inactivity.hibernation(VirtualCluster(obj), at(2000), None) is None
    assert inactivity.hibernation(VirtualCluster(obj), at(2800), None) is not None


def test_a_control_plane_that_is_not_running_is_not_hibernated_for_inactivity() -> None:
    obj = running({"afterInactivity": "1m"})
    obj["status"]["conditions"][0] = cond("ControlPlaneReady", "False", "Starting", 0)
    assert not inactivity.inactivity_due(VirtualCluster(obj), at(10**5), None)
    assert inactivity.hibernation(VirtualCluster(obj), at(10**5), None) is None


def test_a_cluster_hibernated_for_inactivity_sleeps_until_asked_to_wake() -> None:
    obj = asleep({"afterInactivity": "30m", "wakeOnAccess": True}, "Inactive", since=100)
    why = inactivity.hibernation(VirtualCluster(obj), at(10**6), None)
    assert why == Hibernation("Inactive", "no request from a user since ...")  # its message is kept as it was
    assert not VirtualCluster(obj).wake_pending
    # a wake request older than the sleep is a stale one
    stale = asleep({"afterInactivity": "30m"}, "Inactive", since=100, annotations={sleep.WAKE_ANNOTATION: stamp(99)})
    assert inactivity.hibernation(VirtualCluster(stale), at(200), None) is not None
    for woken in (asleep({"afterInactivity": "30m"}, "Inactive", since=100,
                         annotations={sleep.WAKE_ANNOTATION: stamp(100)}),
                  asleep({"wakeOnAccess": True}, "Inactive", since=100)):  # afterInactivity removed
        assert inactivity.hibernation(VirtualCluster(woken), at(200), None) is None
    # an annotation that is no time is no request
    garbage = asleep({"afterInactivity": "30m"}, "Inactive", since=100, annotations={sleep.WAKE_ANNOTATION: "now"})
    assert inactivity.hibernation(VirtualCluster(garbage), at(200), None) is not None


def test_a_cluster_hibernated_by_the_spec_wakes_only_by_the_spec() -> None:
    obj = asleep({"hibernated": True}, "Hibernated", since=100, annotations={sleep.WAKE_ANNOTATION: stamp(200)})
    assert inactivity.hibernation(VirtualCluster(obj), at(300), None) is not None
    assert not VirtualCluster(obj).wake_pending
    obj["spec"]["hibernation"]["hibernated"] = False
    assert inactivity.hibernation(VirtualCluster(obj), at(300), None) is None


def test_the_spec_view_reads_defaults_and_durations() -> None:
    view = VirtualCluster(running({"afterInactivity": "1h30m"})).spec.hibernation
    assert view.used and not view.hibernated and view.wake_on_access
    assert view.after_inactivity == dt.timedelta(minutes=90) and view.after_inactivity_text == "1h30m"
    assert VirtualCluster(running()).spec.hibernation == sleep.HibernationSpec()
    assert VirtualCluster(running({"wakeOnAccess": False})).spec.hibernation.wake_on_access is False
    assert sleep.read_spec(None) == sleep.read_spec("junk") == sleep.HibernationSpec()


# -- the status each pass leads to ------------------------------------------------------------------------------------


def test_hibernation_is_announced_before_anything_stops() -> None:
    why = Hibernation("Hibernated", "spec.hibernation.hibernated is true")
    out = status.hibernating(running({"hibernated": True}), why, stamp(10))
    assert out.status["phase"] == "Hibernating" and out.requeue_after == 0.0
    assert conditions(out.status) == {"ControlPlaneReady": ("False", "Hibernating"),
                                      "NodesReady": ("True", "NoNodesRequested"), "Ready": ("False", "Hibernating"),
                                      "Hibernated": ("True", "Hibernated")}
    assert out.event is not None and out.event[1] == "Hibernating"


def test_hibernated_once_everything_stopped_with_nodes_returned() -> None:
    why = Hibernation("Inactive", "no request from a user since ...")
    obj = running({"afterInactivity": "1m"})
    obj["status"].update(phase="Hibernating", nodes=[{"name": "n1", "phase": "Ready"}])
    out = status.hibernated(obj, why, Stopping(stopped=True), stamp(20))
    assert out.status["phase"] == "Hibernated" and out.status["nodes"] == []
    assert conditions(out.status) == {"ControlPlaneReady": ("False", "Hibernated"),
                                      "NodesReady": ("False", "Hibernated"), "Ready": ("False", "Hibernated"),
                                      "Hibernated": ("True", "Inactive")}
    assert out.requeue_after is None and not out.backoff
    waiting = status.hibernated(obj, why, Stopping(stopped=False), stamp(20))
    assert (waiting.status["phase"], waiting.status["reason"]) == ("Hibernating", "StoppingControlPlane")
    assert waiting.requeue_after == status.POLL
    failed = status.hibernated(obj, why, Stopping(failure=RuntimeFailure("HostUnavailable", "no host")), stamp(20))
    assert (failed.status["phase"], failed.status["reason"]) == ("Hibernating", "HostUnavailable")
    assert failed.requeue_after == status.RUNTIME_RETRY
    cut_off = status.hibernated(obj, why, Stopping(unreachable="host down"), stamp(20))
    assert cut_off.status["phase"] == "Hibernating" and cut_off.backoff
    assert conditions(cut_off.status)["NodesReady"] == ("False", "HostUnreachable")


def test_a_woken_cluster_is_waking_until_its_control_plane_is_ready_then_awake() -> None:
    obj = asleep({"hibernated": False}, "Hibernated", since=100)
    starting = ControlPlaneState(False, "Starting", "waiting", ENDPOINT, 20001)
    out = status.built(obj, Observed(state=starting), "process", stamp(200))
    assert (out.status["phase"], out.status["reason"]) == ("Waking", "Waking")
    assert conditions(out.status)["Hibernated"] == ("False", "Waking")
    hibernated_cond = next(c for c in out.status["conditions"] if c["type"] == "Hibernated")
    assert hibernated_cond["lastTransitionTime"] == stamp(200)
    obj["status"] = out.status
    ready = ControlPlaneState(True, "ControlPlaneRunning", "ready", ENDPOINT, 20001)
    out = status.built(obj, Observed(state=ready), "process", stamp(230))
    assert out.status["phase"] == "Completed"
    assert conditions(out.status)["Hibernated"] == ("False", "Awake")
    assert conditions(out.status)["Ready"] == ("True", "Ready")
    cp = next(c for c in out.status["conditions"] if c["type"] == "ControlPlaneReady")
    assert cp["lastTransitionTime"] == stamp(230)  # where the inactivity clock starts again


def test_a_failure_while_waking_keeps_the_waking_phase() -> None:
    obj = asleep({"hibernated": False}, "Hibernated", since=100)
    obj["status"]["phase"] = "Waking"
    out = status.built(obj, Observed(failure=RuntimeFailure("NoFreePorts", "none")), "process", stamp(200))
    assert (out.status["phase"], out.status["reason"]) == ("Waking", "NoFreePorts")


def test_clusters_that_never_use_hibernation_get_no_hibernated_condition() -> None:
    ready = ControlPlaneState(True, "ControlPlaneRunning", "ready", ENDPOINT, 20001)
    out = status.built(running(), Observed(state=ready), "process", stamp(10))
    assert "Hibernated" not in conditions(out.status)
    out = status.built(running({"afterInactivity": "2h"}), Observed(state=ready), "process", stamp(10))
    hibernated_cond = next(c for c in out.status["conditions"] if c["type"] == "Hibernated")
    assert (hibernated_cond["status"], hibernated_cond["reason"]) == ("False", "Awake")
    assert "after 2h without a request from a user" in hibernated_cond["message"]


# -- the audit log ----------------------------------------------------------------------------------------------------


def event(when: str, user: str = "alice") -> str:
    return json.dumps({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "stage":
                       "ResponseComplete", "user": {"username": user}, "stageTimestamp": when},
                      separators=(",", ":"))


def test_the_last_audit_event_is_found_among_other_lines() -> None:
    lines = ["I0301 12:00:00.000000 1 server.go:1] serving", event("2025-03-01T12:00:01.123456Z"),
             event("2025-03-01T12:00:05.000001Z"), '{"kind":"Event","apiVersion":"audit.k8s.io/v1","sta',
             "W0301 12:00:09 a warning"]
    assert audit.latest(lines) == dt.datetime(2025, 3, 1, 12, 0, 5, 1, tzinfo=dt.UTC)
    assert audit.latest(["nothing here"]) is None
    assert all(line.startswith(audit.MARKER) for line in lines[1:3])


def test_the_audit_policy_counts_tenant_admins_first_and_skips_the_tenants_own_machinery() -> None:
    rules = audit.POLICY["rules"]
    assert rules[0] == {"level": "Metadata", "userGroups": ["kosmos:tenant-admins"]}
    skipped = {u for r in rules if r["level"] == "None" for u in r.get("users", []) + r.get("userGroups", [])}
    assert {"kubernetes-admin", "system:kube-controller-manager", "system:kube-scheduler", "system:apiserver",
            "system:nodes", "system:serviceaccounts", "system:unauthenticated"} <= skipped
    assert rules[-1] == {"level": "Metadata"} and audit.POLICY["omitStages"] == ["RequestReceived"]
    assert audit.audited(audit.flags("/p.yaml", "-")) and not audit.audited(["kube-apiserver", "--v=1"])
