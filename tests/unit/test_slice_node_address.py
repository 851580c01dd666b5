"""Where a slice's virtual node says it is, when the shared kubelet API is published as a host NodePort
Service: a Ready slice-pool node's InternalIP, kept while it stays in the pool."""

from __future__ import annotations

from typing import Any

from reconciler.options import SliceOptions
from reconciler.shared import nodeaddress
from reconciler.shared.placement import Placement

Obj = dict[str, Any]
POOL = Placement.from_flags("lab.kosmos.io/real-node=true", "")


def node(name: str, ip: str, ready: str = "True", pool: bool = True) -> Obj:
    return {"metadata": {"name": name, "labels": {"lab.kosmos.io/real-node": "true"} if pool else {}},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def test_the_first_ready_pool_node_by_name_gives_the_address() -> None:
    nodes = [node("worker-2", "10.0.0.12"), node("kwok-0", "10.0.0.2", pool=False),
             node("worker-0", "10.0.0.10", ready="Unknown"), node("worker-1", "10.0.0.11")]
    assert nodeaddress.pool_address(nodes, POOL) == "10.0.0.11"


def test_the_address_in_use_is_kept_while_its_node_stays_in_the_pool() -> None:
    nodes = [node("worker-1", "10.0.0.11"), node("worker-2", "10.0.0.12")]
    assert nodeaddress.pool_address(nodes, POOL, keep="10.0.0.12") == "10.0.0.12"
    assert nodeaddress.pool_address([node("worker-1", "10.0.0.11")], POOL, keep="10.0.0.12") == "10.0.0.11"
    assert nodeaddress.pool_address([], POOL, keep="10.0.0.12") == ""


def test_the_published_service_is_a_selectorless_node_port_whose_endpoint_is_this_server() -> None:
    p = nodeaddress.Published("kosmos-system", "vc-apiserver-kubelet", "10.200.0.7", 10250)
    svc, es = nodeaddress.kubelet_service(p), nodeaddress.kubelet_endpointslice(p)
    assert svc["spec"]["type"] == "NodePort" and "selector" not in svc["spec"]
    assert es["metadata"]["labels"]["kubernetes.io/service-name"] == "vc-apiserver-kubelet"
    assert es["endpoints"] == [{"addresses": ["10.200.0.7"], "conditions": {"ready": True}}]
    assert es["ports"][0]["name"] == svc["spec"]["ports"][0]["name"] and es["ports"][0]["port"] == 10250


def slice_options(**flags: Any) -> SliceOptions:
    base = dict(slice_overcommit=1.0, slice_node_selector="", slice_tolerations="", slice_service_cidrs="10.112.0.0/12",
                slice_service_cidr_prefix=22, slice_kubelet_port=10250, slice_kubelet_address="10.200.0.7",
                slice_kubelet_service="", slice_storage_classes="")
    return SliceOptions(**{**base, **flags})


def test_the_service_flag_names_a_namespace_and_a_name_and_needs_the_api_it_publishes() -> None:
    assert slice_options(slice_kubelet_service="kosmos-system/vc-apiserver-kubelet").validate() == []
    assert slice_options(slice_kubelet_service="kosmos-system/vc-apiserver-kubelet").to_config().kubelet_service == \
        ("kosmos-system", "vc-apiserver-kubelet")
    assert any("NAMESPACE/NAME" in p for p in slice_options(slice_kubelet_service="just-a-name").validate())
    assert any("needs --slice-kubelet-port" in p
               for p in slice_options(slice_kubelet_service="a/b", slice_kubelet_port=0).validate())
