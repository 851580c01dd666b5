"""What promotion tests check on both kinds of host (kwok nodes, real nodes): claims, phases, the tenant's
view of its nodes, and a node's return home."""

from __future__ import annotations

import time
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


def wait_vc(host: Kubectl, ns: str, name: str, condition: str, timeout: int = 120) -> None:
    """``kubectl wait --for=<condition>`` on a VirtualCluster, asked again while the aggregator answers 503.

    After vc-apiserver restarts, the aggregator serves 503 until its next availability check passes;
    ``kubectl wait`` gives up on the first error, a client with kube's retry semantics asks again."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(1, int(deadline - time.monotonic()))
        proc = host.run("wait", f"vc/{name}", "-n", ns, f"--for={condition}", f"--timeout={left}s",
                        check=False, timeout=left + 30)
        if proc.returncode == 0:
            return
        if "ServiceUnavailable" not in proc.stderr or time.monotonic() >= deadline:
            raise AssertionError(f"kubectl wait vc/{name} --for={condition} failed ({proc.returncode}):\n"
                                 f"{proc.stderr}")
        time.sleep(1)


def wait_phase(host: Kubectl, ns: str, name: str, phase: str, timeout: int = 120) -> None:
    wait_vc(host, ns, name, f"jsonpath={{.status.phase}}={phase}", timeout)


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
