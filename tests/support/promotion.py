"""What promotion tests check on both kinds of host (kwok nodes, real nodes): claims, phases, the tenant's
view of its nodes, and a node's return home."""

from __future__ import annotations

from pathlib import Path

from reconciler.nodes.selection import CLAIM_LABEL
from tests.conftest import Kubectl

GV = "/apis/kosmos.io/v1alpha1"


def claims(host: Kubectl) -> dict[str, str]:
    """Host node → claim label value, for every node."""
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(CLAIM_LABEL, "")
            for n in host.json("get", "nodes")["items"]}


def tenant(host: Kubectl, ns: str, name: str, tmp_path: Path) -> Kubectl:
    raw = host.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/{name}/kubeconfig").stdout
    path = tmp_path / f"{ns}-{name}.kubeconfig"
    path.write_text(raw)
    return Kubectl(path)


def wait_phase(host: Kubectl, ns: str, name: str, phase: str, timeout: int = 120) -> None:
    host.run("wait", f"vc/{name}", "-n", ns, f"--for=jsonpath={{.status.phase}}={phase}", f"--timeout={timeout}s",
             timeout=timeout + 30)


def ready_tenant_nodes(t: Kubectl) -> list[str]:
    return sorted(n["metadata"]["name"] for n in t.json("get", "nodes")["items"]
                  if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])))


def assert_returned(host: Kubectl, names: list[str]) -> None:
    """Back in the host: no claim label, no taint of ours, schedulable."""
    for node in host.json("get", "nodes")["items"]:
        if node["metadata"]["name"] not in names:
            continue
        assert CLAIM_LABEL not in node["metadata"].get("labels", {}), node["metadata"]["name"]
        assert not [t for t in node["spec"].get("taints", []) if t["key"] == CLAIM_LABEL]
        assert not node["spec"].get("unschedulable"), node["metadata"]["name"]
