"""Which host control-plane node a ``pods`` runtime tenant apiserver is reached through."""

from __future__ import annotations

from typing import Any

from reconciler.runtime.pods.endpoint import serving_address, serving_nodes


def node(name: str, ip: str, ready: str = "True", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def test_a_ready_control_plane_node_serves_and_a_notready_or_deleted_one_never_does() -> None:
    assert serving_address(node("real-control-plane", "10.99.0.10")) == ("real-control-plane", "10.99.0.10")
    assert serving_address(node("gone", "10.99.0.11", ready="Unknown")) is None
    assert serving_address(node("leaving", "10.99.0.12", deletionTimestamp="2026-11-28T10:00:00Z")) is None
    assert serving_address({"metadata": {"name": "bare"}, "status": {}}) is None


def test_a_routable_node_wins_over_a_loopback_one_that_sorts_first() -> None:
    """The kwok control-plane node an earlier `make up` left (127.0.0.1, sorting first) is the case seen:
    in a pod, 127.0.0.1 is the pod itself."""
    stale, real = node("node-control-plane", "127.0.0.1"), node("real-control-plane", "10.99.0.10")
    assert serving_nodes([stale, real]) == [("real-control-plane", "10.99.0.10"), ("node-control-plane", "127.0.0.1")]
    assert serving_nodes([stale]) == [("node-control-plane", "127.0.0.1")], "a lab with only loopback still works"
    assert serving_nodes([node("b", "10.0.0.2"), node("a", "10.0.0.1")])[0] == ("a", "10.0.0.1")
