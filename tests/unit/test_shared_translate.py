"""A shared slice's pure rules: names, the host pod a tenant pod becomes, the status it reports back,
and the host quota and tenant node a slice consists of."""

from __future__ import annotations

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
    assert notes[names.TENANT_LABELS] == 'app="web"'
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


ROUTED = translate.TenantNetwork("10.112.4.0/22")
API_ACCESS = {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}


def test_with_a_routed_network_the_token_volume_reads_the_tenants_token_ca_and_namespace() -> None:
    vault = {"name": "vault", "projected": {"sources": [
        {"serviceAccountToken": {"path": "vault-token", "audience": "vault", "expirationSeconds": 600}}]}}
    pod = tenant_pod(volumes=[API_ACCESS, vault], containers=[{
        "name": "c", "image": "busybox", "volumeMounts": [{"name": API_ACCESS["name"], "mountPath": "/var/run/sa"}]}])
    assert translate.token_asks(pod) == [translate.TokenAsk(f"{API_ACCESS['name']}.0", "", 3607),
                                         translate.TokenAsk("vault.0", "vault", 600)]
    assert translate.references(pod, ROUTED).configmaps == {"kube-root-ca.crt": False}
    spec = translate.host_pod(VC, pod, network=ROUTED)["spec"]
    access, vault_volume = spec["volumes"]
    token, ca, namespace = access["projected"]["sources"]
    assert token == {"secret": {"name": "web-1.token-x-default",
                                "items": [{"key": f"{API_ACCESS['name']}.0", "path": "token"}]}}
    assert ca["configMap"]["name"] == "kube-root-ca.crt-x-default"
    assert namespace["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == \
        f"metadata.annotations['{names.TENANT_NAMESPACE}']"
    assert vault_volume["projected"]["sources"][0]["secret"]["items"] == [{"key": "vault.0", "path": "vault-token"}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": API_ACCESS["name"], "mountPath": "/var/run/sa"}]
    assert spec["automountServiceAccountToken"] is False  # never a host token


def test_a_token_secret_is_the_slices_bound_to_the_tenant_pod_and_says_when_to_refresh() -> None:
    pod = tenant_pod(volumes=[API_ACCESS])
    secret = translate.token_secret(VC, pod, {f"{API_ACCESS['name']}.0": "jwt"}, "2026-11-29T01:00:00Z")
    assert secret["metadata"]["name"] == translate.token_secret_name(pod) == "web-1.token-x-default"
    assert secret["metadata"]["labels"][names.TOKEN_OF] == "pod-uid-1"
    assert secret["metadata"]["annotations"][names.REFRESH_AT] == "2026-11-29T01:00:00Z"
    assert names.owned_by(secret, VC["metadata"]["uid"])


def test_cluster_first_pods_resolve_with_the_tenants_dns_and_their_own_config_merged() -> None:
    pod = tenant_pod(dnsConfig={"searches": ["corp.example"], "options": [{"name": "ndots", "value": "2"},
                                                                         {"name": "edns0"}]})
    spec = translate.host_pod(VC, pod, network=ROUTED)["spec"]
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == {"nameservers": ["10.112.4.10"],
                                 "searches": ["default.svc.cluster.local", "svc.cluster.local", "cluster.local",
                                              "corp.example"],
                                 "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}
    for policy in ("Default", "None"):
        kept = translate.host_pod(VC, tenant_pod(dnsPolicy=policy), network=ROUTED)["spec"]
        assert kept["dnsPolicy"] == policy and "dnsConfig" not in kept


def test_containers_see_the_tenants_services_in_their_environment_and_their_own_values_win() -> None:
    web = {"metadata": {"namespace": "default", "name": "web-front"},
           "spec": {"clusterIP": "10.112.4.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}
    headless = {"metadata": {"namespace": "default", "name": "db"}, "spec": {"clusterIP": "None", "ports": []}}
    elsewhere = {"metadata": {"namespace": "other", "name": "api"}, "spec": {"clusterIP": "10.112.4.21", "ports": []}}
    pod = tenant_pod(containers=[{"name": "c", "image": "busybox", "env": [{"name": "WEB_FRONT_SERVICE_HOST",
                                                                            "value": "mine"}]}])
    env = translate.host_pod(VC, pod, network=ROUTED, services=[web, headless, elsewhere])["spec"]["containers"][0]["env"]
    values = {e["name"]: e["value"] for e in env}  # the last of a name wins, as in a kubelet
    assert values["KUBERNETES_SERVICE_HOST"] == "10.112.4.1" and values["KUBERNETES_SERVICE_PORT"] == "443"
    assert values["WEB_FRONT_SERVICE_PORT_HTTP"] == "80"
    assert values["WEB_FRONT_PORT_80_TCP"] == "tcp://10.112.4.20:80"
    assert values["WEB_FRONT_SERVICE_HOST"] == "mine"
    assert not any(k.startswith(("DB_", "API_")) for k in values)
    unlinked = translate.host_pod(VC, tenant_pod(enableServiceLinks=False), network=ROUTED, services=[web])
    names_seen = {e["name"] for e in unlinked["spec"]["containers"][0]["env"]}
    assert "KUBERNETES_SERVICE_HOST" in names_seen and not any(n.startswith("WEB_") for n in names_seen)


def test_a_tenant_service_becomes_a_selectorless_host_service_at_the_same_address() -> None:
    svc = {"metadata": {"namespace": "default", "name": "web", "uid": "svc-uid"},
           "spec": {"type": "NodePort", "clusterIP": "10.112.4.20", "clusterIPs": ["10.112.4.20"],
                    "selector": {"app": "web"}, "externalTrafficPolicy": "Local",
                    "ports": [{"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080, "protocol": "TCP"}]}}
    host = translate.host_service(VC, svc)
    assert host is not None and host["metadata"]["name"] == "web-x-default"
    assert host["spec"] == {"type": "NodePort", "clusterIP": "10.112.4.20", "clusterIPs": ["10.112.4.20"],
                            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
                            "sessionAffinity": "None", "externalTrafficPolicy": "Cluster"}
    assert translate.service_differs({"spec": {**host["spec"], "ports": [{**host["spec"]["ports"][0], "targetPort": 80}],
                                               "ipFamilies": ["IPv4"]}}, host) == ""
    assert translate.service_differs({"spec": {**host["spec"], "clusterIP": "10.112.4.30"}}, host) == "replace"
    assert translate.service_differs({"spec": {**host["spec"], "ports": []}}, host) == "update"
    for spec in ({"clusterIP": "None"}, {"type": "ExternalName", "externalName": "example.com"}):
        assert translate.host_service(VC, {"metadata": svc["metadata"], "spec": spec}) is None


def test_an_endpointslice_is_mirrored_with_its_addresses_and_none_of_the_tenants_names() -> None:
    es = {"metadata": {"namespace": "default", "name": "web-abcde", "uid": "es-uid",
                       "labels": {"kubernetes.io/service-name": "web"}},
          "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
          "endpoints": [{"addresses": ["10.200.1.7"], "conditions": {"ready": True}, "nodeName": names.NODE_NAME,
                         "targetRef": {"kind": "Pod", "name": "web-1"}, "zone": "z"}]}
    host = translate.host_endpointslice(VC, es, "web-x-default")
    assert host["metadata"]["name"] == "web-abcde-x-default"
    assert host["metadata"]["labels"]["kubernetes.io/service-name"] == "web-x-default"
    assert host["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] != "endpointslice-controller.k8s.io"
    assert host["endpoints"] == [{"addresses": ["10.200.1.7"], "conditions": {"ready": True}}]
    assert not translate.endpointslice_differs(host, host)
    assert translate.endpointslice_differs({**host, "endpoints": []}, host)


@pytest.mark.parametrize("volume", [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}},
                                    {"name": "v", "hostPath": {"path": "/etc"}},
                                    {"name": "v", "csi": {"driver": "x"}}])
def test_node_bound_volumes_are_refused_with_provider_failed(volume: Obj) -> None:
    with pytest.raises(translate.Refused) as refused:
        translate.host_pod(VC, tenant_pod(volumes=[volume]))
    assert refused.value.reason == "ProviderFailed" and "'v'" in refused.value.message


def test_claims_run_on_host_claims_where_storage_is_offered_and_are_refused_where_not() -> None:
    pod = tenant_pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "db"}},
                              {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
    assert translate.claim_names(pod) == ["db", "web-1-scratch"]
    with pytest.raises(translate.Refused) as refused:
        translate.host_pod(VC, pod)
    assert "--slice-storage-classes" in refused.value.message
    spec = translate.host_pod(VC, pod, storage=True)["spec"]
    assert spec["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "db-x-default"}},
                               {"name": "scratch", "persistentVolumeClaim": {"claimName": "web-1-scratch-x-default"}}]


def test_an_offered_class_a_claim_and_its_volume_as_the_tenant_and_the_host_see_them() -> None:
    host_class = {"metadata": {"name": "local", "annotations": {translate.DEFAULT_CLASS: "true"}},
                  "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete",
                  "volumeBindingMode": "WaitForFirstConsumer"}
    tenant_class = translate.tenant_storage_class(host_class, default=True)
    assert (tenant_class["metadata"]["name"], tenant_class["provisioner"], tenant_class["volumeBindingMode"]) == \
        ("local", translate.PROVISIONER, "Immediate")
    assert tenant_class["metadata"]["annotations"] == {translate.DEFAULT_CLASS: "true"}
    assert not translate.storage_class_differs(tenant_class, tenant_class)
    assert translate.storage_class_differs(tenant_class, translate.tenant_storage_class(host_class, default=False))
    claim = {"metadata": {"namespace": "default", "name": "db", "uid": "claim-uid"},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                      "resources": {"requests": {"storage": "100Mi"}}}}
    held = translate.host_claim(VC, claim)
    assert (held["metadata"]["name"], held["metadata"]["namespace"]) == ("db-x-default", names.host_namespace(VC))
    assert held["spec"]["resources"] == {"requests": {"storage": "100Mi"}} and held["spec"]["storageClassName"] == "local"
    assert names.owned_by(held, VC["metadata"]["uid"])
    volume = translate.tenant_volume(VC, claim)
    assert volume["metadata"]["name"] == "pvc-claim-uid"
    assert volume["spec"]["claimRef"]["uid"] == "claim-uid" and volume["spec"]["capacity"] == {"storage": "100Mi"}
    assert volume["spec"]["csi"] == {"driver": translate.PROVISIONER,
                                     "volumeHandle": f"{names.host_namespace(VC)}/db-x-default"}


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
    assert translate.limit_range(VC)["spec"]["limits"][0]["defaultRequest"] == {"cpu": "1m", "memory": "1Mi"}
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


def test_the_node_points_its_tenant_apiserver_at_the_kubelet_api_where_it_is_served() -> None:
    slice_ = {"cpu": "1", "memory": "1Gi"}
    served = translate.node_status(slice_, True, "SliceReady", "ok", "2026-11-25T10:00:00Z", "v1.35.4",
                                   kubelet=("10.99.0.1", 41250))
    assert served["addresses"] == [{"type": "InternalIP", "address": "10.99.0.1"},
                                   {"type": "Hostname", "address": names.NODE_NAME}]
    assert served["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 41250}}
    unserved = translate.node_status(slice_, True, "SliceReady", "ok", "2026-11-25T10:00:00Z", "v1.35.4")
    assert unserved["addresses"] == [{"type": "Hostname", "address": names.NODE_NAME}]
    assert unserved["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 0}}


def test_a_tenant_pods_new_labels_and_annotations_change_what_its_host_pod_shows_its_downward_api() -> None:
    pod = {"metadata": {"name": "web", "namespace": "default", "uid": "u1", "labels": {"app": "web"},
                        "annotations": {"a": "1"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    before = translate.downward_metadata(pod)

    pod["metadata"]["labels"]["tier"] = "front"
    after = translate.downward_metadata(pod)

    assert before != after
    assert after[names.TENANT_LABELS] == 'app="web"\ntier="front"'  # what a kubelet writes for metadata.labels
    assert after[names.TENANT_ANNOTATIONS] == 'a="1"'


def test_env_reading_one_tenant_label_or_annotation_reads_the_tenants_kept_current_on_the_host_pod() -> None:
    pod = tenant_pod(containers=[{"name": "c", "image": "busybox", "env": [
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/i']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}])
    pod["metadata"]["annotations"]["batch.kubernetes.io/i"] = "3"
    host = translate.host_pod(VC, pod)
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in host["spec"]["containers"][0]["env"]}
    assert env["IP"] == "status.podIP"  # the host pod's own answers
    notes = host["metadata"]["annotations"]
    read = {name: notes.get(path.removeprefix("metadata.annotations['").removesuffix("']"))
            for name, path in env.items() if name != "IP"}
    assert read == {"APP": "web", "INDEX": "3"}
    del pod["metadata"]["annotations"]["batch.kubernetes.io/i"]  # gone from the tenant: gone from the host pod
    key = env["INDEX"].removeprefix("metadata.annotations['").removesuffix("']")
    assert translate.downward_metadata(pod)[key] is None


def test_a_pod_keeps_the_hostname_it_asks_for() -> None:
    assert translate.host_pod(VC, tenant_pod(hostname="querier-1"))["spec"]["hostname"] == "querier-1"


def running_host(pod: Obj) -> Obj:
    host = translate.host_pod(VC, pod)
    host["metadata"]["generation"] = 1
    host["status"] = {"observedGeneration": 1, "phase": "Running",
                      "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}]}
    return host


def test_a_running_pod_with_nothing_changed_needs_no_host_change() -> None:
    pod = tenant_pod(activeDeadlineSeconds=60)
    assert not translate.spec_changes(pod, running_host(pod))


def test_images_deadline_resources_and_ephemeral_containers_reach_a_running_host_pod() -> None:
    pod = tenant_pod(containers=[{"name": "c", "image": "busybox",
                                  "resources": {"limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}}])
    host = running_host(pod)
    host["spec"]["containers"][0]["resources"]["requests"]["memory"] = "128Mi"  # the host's default stays
    pod["spec"]["containers"][0].update(image="nginx", resources={"limits": {"cpu": "300m"},
                                                                  "requests": {"cpu": "300m"}})
    pod["spec"]["activeDeadlineSeconds"] = 5
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "env": [
        {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}]}]
    changes = translate.spec_changes(pod, host)
    assert changes.spec == {"containers": [{"name": "c", "image": "nginx"}], "activeDeadlineSeconds": 5}
    assert changes.resize == {"containers": [{"name": "c", "resources": {"limits": {"cpu": "300m"},
                                                                          "requests": {"cpu": "300m"}}}]}
    assert [c["name"] for c in changes.ephemeral] == ["debug"]
    assert changes.ephemeral[0]["env"][0]["valueFrom"]["configMapKeyRef"]["name"] == "settings-x-default"
    host["spec"]["ephemeralContainers"] = changes.ephemeral
    assert not translate.spec_changes(pod, host).ephemeral  # one that runs is not sent again


def test_a_pod_is_made_on_the_host_without_ephemeral_containers() -> None:
    pod = tenant_pod(ephemeralContainers=[{"name": "debug", "image": "busybox"}])
    assert "ephemeralContainers" not in translate.host_pod(VC, pod)["spec"]


def test_observed_generation_is_the_tenants_once_the_host_pod_has_its_changes_and_its_kubelet_acted() -> None:
    pod = tenant_pod()
    pod["metadata"]["generation"] = 3
    pod["status"] = {"observedGeneration": 2}
    host = running_host(pod)
    caught_up = translate.tenant_status(pod, host)
    assert caught_up["observedGeneration"] == 3
    assert [c["observedGeneration"] for c in caught_up["conditions"] if c["type"] == "Ready"] == [3]
    assert translate.tenant_status(pod, host, caught_up=False)["observedGeneration"] == 2
    host["metadata"]["generation"] = 2  # the host's kubelet has not acted on its latest spec yet
    assert translate.tenant_status(pod, host)["observedGeneration"] == 2


def test_a_disruption_the_tenant_started_stays_on_its_pod() -> None:
    pod = tenant_pod()
    pod["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    status = translate.tenant_status(pod, running_host(pod))
    assert {c["type"] for c in status["conditions"]} == {"DisruptionTarget", "Ready"}


def test_a_host_pod_asks_the_host_only_for_resources_a_slice_promises() -> None:
    resources = {"requests": {"cpu": "100m", "example.com/foo": "1", "hugepages-2Mi": "2Mi"},
                 "limits": {"example.com/foo": "1"}}
    pod = tenant_pod(containers=[{"name": "c", "image": "busybox", "resources": resources}])
    host = translate.host_pod(VC, pod)
    assert host["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m", "hugepages-2Mi": "2Mi"}}
    host["metadata"]["generation"] = 1
    assert not translate.spec_changes(pod, host)  # what the host never had is no change to make


def test_container_resources_in_the_status_are_only_those_the_tenant_states() -> None:
    stated = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    pod = tenant_pod(containers=[{"name": "c", "image": "busybox", "resources": stated},
                                 {"name": "best-effort", "image": "busybox"}])
    host = running_host(pod)
    defaulted = {"cpu": "100m", "memory": "128Mi"}  # the host's LimitRange: requests for what states none
    host["status"]["containerStatuses"] = [
        {"name": "c", "allocatedResources": {"cpu": "1", "memory": "128Mi"},
         "resources": {"requests": {"cpu": "1", "memory": "128Mi"}, "limits": {"cpu": "1"}}},
        {"name": "best-effort", "allocatedResources": defaulted, "resources": {"requests": defaulted}}]
    [c, best_effort] = translate.tenant_status(pod, host)["containerStatuses"]
    assert (c["allocatedResources"], c["resources"]) == ({"cpu": "1"}, stated)
    assert "allocatedResources" not in best_effort and best_effort["resources"] == {}


def test_a_pod_made_again_under_its_name_does_not_take_its_predecessors_tokens() -> None:
    volume = {"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    pod = tenant_pod(volumes=[volume])
    secret = translate.token_secret(VC, pod, {"kube-api-access-abcde.0": "t"}, "2026-11-25T10:00:00Z")
    secret["data"] = secret.pop("stringData")
    assert translate.tokens_current(secret, pod)
    again = tenant_pod(volumes=[{**volume, "name": "kube-api-access-fghij"}])
    again["metadata"]["uid"] = "pod-uid-2"
    assert not translate.tokens_current(secret, again)
