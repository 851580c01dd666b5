"""A shared slice's pure rules: names, the host pod a tenant pod becomes, the status it reports back,
and the host quota and tenant node a slice consists of."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.shared import names, translate

Obj = dict[str, Any]
VC: Obj = {"metadata": {"namespace": "tenant1", "name": "cluster", "uid": "7d1c0a4e-0000-4000-8000-000000000001"}}


def tenant_pod(**spec: Any) -> Obj:
    return {"metadata": {"namespace": "default", "name": "web-1", "uid": "pod-uid-1",
                         "labels": {"app": "web"}, "annotations": {"note": "x"},
                         "creationTimestamp": "2026-11-25T10:00:00Z"},
            "spec": {"nodeName": names.NODE_NAME, "containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_the_host_namespace_is_stable_valid_and_differs_for_a_recreated_cluster() -> None:
    ns = names.host_namespace(VC)
    assert ns == names.host_namespace(VC) and ns.startswith("vcw-tenant1-cluster-") and len(ns) <= 63
    again = {"metadata": {**VC["metadata"], "uid": "7d1c0a4e-0000-4000-8000-000000000002"}}
    assert names.host_namespace(again) != ns


def test_long_names_are_cut_to_63_with_a_hash_so_they_never_collide() -> None:
    a = names.host_name("team-" + "a" * 60, "x" * 50)
    b = names.host_name("team-" + "a" * 60, "x" * 49 + "y")
    assert len(a) == len(b) == 63 and a != b
    assert names.host_name("default", "web") == "web-x-default"


def test_a_host_pod_carries_the_tenant_identity_and_none_of_its_scheduling_or_labels() -> None:
    pod = tenant_pod(tolerations=[{"operator": "Exists"}], priorityClassName="system-cluster-critical", priority=2e9,
                     nodeSelector={"disk": "ssd"}, affinity={"nodeAffinity": {}}, schedulerName="other",
                     serviceAccountName="builder", subdomain="s")
    host = translate.host_pod(VC, pod)
    assert host["metadata"]["name"] == "web-1-x-default"
    assert host["metadata"]["namespace"] == names.host_namespace(VC)
    assert host["metadata"]["labels"] == {names.MANAGED_BY: names.MANAGER, names.VC_UID: VC["metadata"]["uid"]}
    notes = host["metadata"]["annotations"]
    assert (notes[names.TENANT_NAMESPACE], notes[names.TENANT_NAME], notes[names.TENANT_UID]) == \
        ("default", "web-1", "pod-uid-1")
    assert json.loads(notes[names.TENANT_LABELS]) == {"app": "web"}
    spec = host["spec"]
    for gone in ("nodeName", "tolerations", "priorityClassName", "priority", "nodeSelector", "affinity",
                 "schedulerName", "serviceAccountName", "subdomain"):
        assert gone not in spec, gone
    assert (spec["automountServiceAccountToken"], spec["enableServiceLinks"], spec["hostname"]) == (False, False, "web-1")
    assert names.owned_by(host, VC["metadata"]["uid"])
    assert not names.owned_by({**host, "metadata": {**host["metadata"], "name": "other"}}, VC["metadata"]["uid"])


def test_references_are_mapped_and_the_tenant_token_volume_is_dropped() -> None:
    pod = tenant_pod(
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}},
                 {"name": "kube-api-access-abcde", "projected": {"sources": [
                     {"serviceAccountToken": {"path": "token"}}, {"configMap": {"name": "kube-root-ca.crt"}}]}},
                 {"name": "info", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}],
        imagePullSecrets=[{"name": "pull"}],
        containers=[{"name": "c", "image": "busybox",
                     "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"},
                                      {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets"}],
                     "env": [{"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}},
                             {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                             {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                     "envFrom": [{"configMapRef": {"name": "env", "optional": True}}]}])
    refs = translate.references(pod)
    assert refs.configmaps == {"settings": False, "env": True}
    assert refs.secrets == {"db": False, "pull": False}
    spec = translate.host_pod(VC, pod)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["cfg", "info"]
    assert spec["volumes"][0]["configMap"]["name"] == "settings-x-default"
    assert spec["volumes"][1]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == \
        f"metadata.annotations['{names.TENANT_NAME}']"
    c = spec["containers"][0]
    assert [m["name"] for m in c["volumeMounts"]] == ["cfg"]
    assert c["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "db-x-default"
    assert c["env"][1] == {"name": "NODE", "value": names.NODE_NAME}
    assert c["env"][2]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{names.TENANT_NAME}']"
    assert c["envFrom"][0]["configMapRef"]["name"] == "env-x-default"
    assert spec["imagePullSecrets"] == [{"name": "pull-x-default"}]


@pytest.mark.parametrize("volume", [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}},
                                    {"name": "v", "hostPath": {"path": "/etc"}}])
def test_node_bound_volumes_are_refused_with_provider_failed(volume: Obj) -> None:
    with pytest.raises(translate.Refused) as refused:
        translate.host_pod(VC, tenant_pod(volumes=[volume]))
    assert refused.value.reason == "ProviderFailed" and "'v'" in refused.value.message


def test_status_flows_up_but_the_tenant_keeps_its_qos_class_and_scheduling_condition() -> None:
    tenant = tenant_pod()
    tenant["status"] = {"phase": "Pending", "qosClass": "BestEffort",
                        "conditions": [{"type": "PodScheduled", "status": "True"}]}
    host = {"status": {"phase": "Running", "podIP": "10.244.0.7", "podIPs": [{"ip": "10.244.0.7"}],
                       "hostIP": "127.0.0.1", "qosClass": "Burstable", "startTime": "2026-11-25T10:00:01Z",
                       "containerStatuses": [{"name": "c", "ready": True}],
                       "conditions": [{"type": "PodScheduled", "status": "True", "reason": ""},
                                      {"type": "Ready", "status": "True"}]}}
    status = translate.tenant_status(tenant, host)
    assert (status["phase"], status["podIP"], status["qosClass"]) == ("Running", "10.244.0.7", "BestEffort")
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {"PodScheduled": "True", "Ready": "True", names.HOST_SCHEDULED: "True"}
    assert translate.started({"status": status})
    assert translate.tenant_status({**tenant, "status": status}, host) == status  # a second pass changes nothing


def test_a_lost_host_pod_fails_the_tenant_pod_as_an_eviction_would() -> None:
    status = translate.lost(tenant_pod(), "2026-11-25T10:00:00Z")
    assert (status["phase"], status["reason"]) == ("Failed", "HostPodLost")


def test_quota_limits_and_node_are_exactly_the_slice() -> None:
    slice_ = {"cpu": "10", "memory": "100Gi"}
    assert translate.quota(VC, slice_)["spec"]["hard"] == {"requests.cpu": "10", "requests.memory": "100Gi",
                                                           "pods": "110"}
    assert translate.limit_range(VC)["spec"]["limits"][0]["defaultRequest"] == {"cpu": "100m", "memory": "128Mi"}
    status = translate.node_status(slice_, True, "SliceReady", "ok", "2026-11-25T10:00:00Z", "v1.35.4")
    assert status["capacity"] == status["allocatable"] == {"cpu": "10", "memory": "100Gi", "pods": "110",
                                                            "ephemeral-storage": "100Gi"}
    ready = [c for c in status["conditions"] if c["type"] == "Ready"][0]
    assert (ready["status"], ready["reason"]) == ("True", "SliceReady")
    later = translate.node_status(slice_, True, "SliceReady", "ok", "2026-11-25T10:01:00Z", "v1.35.4",
                                  {"status": status})
    assert [c for c in later["conditions"] if c["type"] == "Ready"][0]["lastTransitionTime"] == "2026-11-25T10:00:00Z"


def test_a_slice_that_states_pods_sets_the_quota_and_the_node_to_that_count() -> None:
    slice_ = {"cpu": "51", "memory": "33Gi", "pods": "510"}
    assert translate.quota(VC, slice_)["spec"]["hard"] == {"requests.cpu": "51", "requests.memory": "33Gi",
                                                           "pods": "510"}
    status = translate.node_status(slice_, True, "SliceReady", "ok", "2026-11-25T10:00:00Z", "v1.35.4")
    assert status["capacity"] == status["allocatable"] == {"cpu": "51", "memory": "33Gi", "pods": "510",
                                                            "ephemeral-storage": "100Gi"}
