"""Which host control-plane node a ``pods`` runtime tenant apiserver is reached through."""

from __future__ import annotations

from typing import Any

from reconciler.runtime.pods.endpoint import serving_address


def node(name: str, ip: str, ready: str = "True", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def test_a_ready_control_plane_node_with_a_routable_address_serves() -> None:
    assert serving_address(node("real-control-plane", "10.99.0.10")) == ("real-control-plane", "10.99.0.10")


def test_a_stale_notready_deleted_or_loopback_node_never_serves() -> None:
    """The kwok control-plane node an earlier `make up` left (127.0.0.1, sorting first) is the case seen."""
    assert serving_address(node("node-control-plane", "127.0.0.1")) is None
    assert serving_address(node("gone", "10.99.0.11", ready="Unknown")) is None
    assert serving_address(node("leaving", "10.99.0.12", deletionTimestamp="2026-11-28T10:00:00Z")) is None
    assert serving_address(node("v6-loopback", "::1")) is None
    assert serving_address({"metadata": {"name": "bare"}, "status": {}}) is None
