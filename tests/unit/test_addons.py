"""Tenant add-ons: the objects a tenant gets once it has a node."""

from __future__ import annotations

import json

from apiserver.kubeclient import paths
from reconciler.controlplane import addons
from reconciler.shared.ranges import dns_address


def test_the_dns_service_takes_the_tenth_address_of_the_service_range() -> None:
    assert dns_address("10.96.0.0/16") == "10.96.0.10"
    [service] = [o for o in addons.coredns("10.96.0.0/12") if o["kind"] == "Service"]
    assert service["spec"]["clusterIP"] == "10.96.0.10"


def test_the_kubernetes_service_points_at_the_endpoint_nodes_use() -> None:
    slice_, endpoints = addons.kubernetes_endpoints("https://10.99.0.1:31443")
    assert slice_["endpoints"][0]["addresses"] == ["10.99.0.1"] and slice_["ports"][0]["port"] == 31443
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kubernetes"
    assert endpoints["subsets"] == [{"addresses": [{"ip": "10.99.0.1"}],
                                     "ports": [{"name": "https", "port": 31443, "protocol": "TCP"}]}]
    assert endpoints["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}


def test_no_kubernetes_endpoints_for_a_loopback_or_named_endpoint() -> None:
    assert addons.kubernetes_endpoints("https://127.0.0.1:6443") == []
    assert addons.kubernetes_endpoints("https://tenant.example.com:6443") == []


def test_kube_proxy_reaches_the_tenant_at_the_endpoint_with_its_service_account() -> None:
    objs = {o["kind"]: o for o in addons.kube_proxy("https://10.99.0.1:31443")}
    assert '"server": "https://10.99.0.1:31443"' in objs["ConfigMap"]["data"]["kubeconfig.conf"]
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["serviceAccountName"] == "kube-proxy"
    assert objs["ClusterRoleBinding"]["roleRef"]["name"] == "system:node-proxier"


def test_kube_proxy_masquerades_only_when_told_the_pods_range() -> None:
    def config(objs: list[dict]) -> dict:
        return json.loads(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.conf"])
    assert "clusterCIDR" not in config(addons.kube_proxy("https://10.99.0.1:31443"))
    assert config(addons.kube_proxy("https://10.99.0.1:6443", "10.200.0.0/16"))["clusterCIDR"] == "10.200.0.0/16"


def test_kube_proxys_pods_roll_when_its_configuration_changes() -> None:
    def annotation(objs: list[dict]) -> str:
        ds = next(o for o in objs if o["kind"] == "DaemonSet")
        return ds["spec"]["template"]["metadata"]["annotations"][addons.CONFIG_DIGEST]
    plain = annotation(addons.kube_proxy("https://10.99.0.1:6443"))
    assert plain == annotation(addons.kube_proxy("https://10.99.0.1:6443"))
    assert plain != annotation(addons.kube_proxy("https://10.99.0.1:6443", "10.200.0.0/16"))


def test_every_add_on_has_a_known_path_and_a_stable_digest() -> None:
    objs = addons.manifests("https://10.99.0.1:31443", "10.96.0.0/16")
    assert all(paths.object_path(o).endswith("/" + o["metadata"]["name"]) for o in objs)
    assert addons.digest(objs) == addons.digest(addons.manifests("https://10.99.0.1:31443", "10.96.0.0/16"))
    assert addons.digest(objs) != addons.digest(addons.manifests("https://10.99.0.1:31444", "10.96.0.0/16"))
