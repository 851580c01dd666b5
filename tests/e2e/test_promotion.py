"""Node promotion on a real host with kwok nodes, real tenant control planes, real kubectl."""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from apiserver.kubeclient.client import KubeClient
from apiserver.kubeclient.events import EventRecorder
from certs import pki
from certs.tenant import TenantPki
from hack.harness import BIN, fake_node, wait_until
from hack.stack import Stack
from reconciler.nodes.kwokjoiner import KwokJoiner
from reconciler.nodes.promoter import NodePromoter
from reconciler.nodes.selection import CLAIM_LABEL, claim_of, is_ready
from reconciler.runtime.process import ProcessRuntime
from tests.conftest import EXAMPLES, Kubectl, process_stack, vc
from tests.support.promotion import (
    GV,
    assert_returned,
    claims,
    ready_tenant_nodes,
    tenant,
    wait_phase,
    wait_vc,
)

pytestmark = pytest.mark.e2e

NODES = 6


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("promotion"), NODES, 5)


@pytest.fixture(scope="module")
def host(stack: Stack) -> Kubectl:
    return Kubectl(stack.kubeconfig, host_namespaces=True)


def policy(count: int, **match: str) -> dict[str, Any]:
    return {"promotePolicies": [{"labelSelector": {"matchLabels": match or {"type": "kwok"}}, "nodeCount": count}]}


def test_promoted_nodes_are_claimed_in_the_host_and_run_tenant_pods(host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("promo")
    host.run("create", "-f", "-", input=json.dumps(vc("two", ns, policy(2))))
    wait_phase(host, ns, "two", "Completed")
    claimed = [n for n, v in claims(host).items() if v == f"{ns}.two"]
    assert len(claimed) == 2
    for node in host.json("get", "nodes")["items"]:
        if node["metadata"]["name"] in claimed:
            assert node["spec"]["unschedulable"] is True
            assert {"key": CLAIM_LABEL, "value": f"{ns}.two", "effect": "NoSchedule"} in node["spec"]["taints"]
    t = tenant(host, ns, "two", tmp_path)
    assert ready_tenant_nodes(t) == sorted(claimed)
    t.run("create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=2")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pods = t.json("get", "pods", "-l", "app=web")["items"]
        if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
            break
        time.sleep(1)
    assert [p["status"].get("phase") for p in pods] == ["Running", "Running"]
    assert {p["spec"]["nodeName"] for p in pods} <= set(claimed)

    for count in (3, 1):
        placed = {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in t.json("get", "pods", "-A")["items"]}
        host.run("patch", "vc", "two", "-n", ns, "--type", "json",
                 "-p", json.dumps([{"op": "replace", "path": "/spec/promotePolicies/0/nodeCount", "value": count}]))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = [n for n, v in claims(host).items() if v == f"{ns}.two"]
            if len(now) == count and ready_tenant_nodes(t) == sorted(now):
                break
            time.sleep(1)
        assert len(now) == count and ready_tenant_nodes(t) == sorted(now)
        assert_returned(host, [n for n in claims(host) if n not in now and n != "node-control-plane"])
        # the pods of the nodes that left went with them (not later, by the tenant's pod GC)
        left = {uid for uid, node in placed.items() if node and node not in now}
        assert left or count == 3  # scaling to 1 takes two nodes, each with its kube-proxy pod at least
        assert not left & {p["metadata"]["uid"] for p in t.json("get", "pods", "-A")["items"]}
    wait_phase(host, ns, "two", "Completed")
    host.run("delete", "vc", "two", "-n", ns, "--wait", timeout=120)
    assert_returned(host, list(claims(host)))


def test_dedicated_resources_request_promotes_enough_nodes(host: Kubectl) -> None:
    ns = host.ensure_namespace("resources")
    spec = {"promoteResources": {"resources": {"cpu": 10}, "resourcesMode": "Dedicated"}}
    host.run("create", "-f", "-", input=json.dumps(vc("cpu", ns, spec)))
    wait_phase(host, ns, "cpu", "Completed")
    claimed = [n for n, v in claims(host).items() if v == f"{ns}.cpu"]
    cpus = [int(host.json("get", "node", n)["status"]["allocatable"]["cpu"]) for n in claimed]
    assert sum(cpus) >= 10 and sum(cpus) - min(cpus) < 10  # enough, and no node more than needed
    host.run("delete", "vc", "cpu", "-n", ns, "--wait", timeout=120)
    assert_returned(host, claimed)


def test_a_namespace_bound_to_a_node_pool_takes_only_nodes_of_that_pool(host: Kubectl) -> None:
    """The platform team annotates the host Namespace (its admins cannot): its VirtualClusters take
    only nodes matching kosmos.io/promotable-nodes; naming another is a shortage, saying so."""
    ns = host.ensure_namespace("pooled")
    host.run("annotate", "namespace", ns, "kosmos.io/promotable-nodes=pool=pooled")
    host.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        fake_node("pool-in", 1, labels={"pool": "pooled"}), fake_node("pool-out", 2, labels={"pool": "elsewhere"})]}))
    try:
        host.run("create", "-f", "-", input=json.dumps(vc("pooled", ns, {"promotePolicies": [{"nodeCount": 1}]})))
        wait_phase(host, ns, "pooled", "Completed")
        assert [n for n, v in claims(host).items() if v == f"{ns}.pooled"] == ["pool-in"]
        host.run("create", "-f", "-", input=json.dumps(vc("named", ns, {"promoteResources": {"nodes": ["pool-out"]}})))
        refused = ("node pool-out is not among the nodes this namespace may take (kosmos.io/promotable-nodes: "
                   "pool=pooled)")
        # Pending is also its phase while its control plane is built: the shortage is told once that is done
        wait_until(lambda: refused in (host.json("get", "vc", "named", "-n", ns).get("status") or {}).get("message", ""),
                   120, "the shortage told in the status", interval=1)
        assert host.json("get", "vc", "named", "-n", ns)["status"]["phase"] == "Pending"
        assert claims(host)["pool-out"] == ""
    finally:
        host.run("delete", "vc", "--all", "-n", ns, "--wait", timeout=120)
        assert_returned(host, ["pool-in"])
        host.run("delete", "node", "pool-in", "pool-out")


def test_the_kosmos_proposal_example_promotes_the_nodes_it_names_and_asks_for_a_shared_slice(host: Kubectl) -> None:
    """Its ``resources`` (cpu 10, memory 100Gi) are a slice of the shared host (``resourcesMode``
    defaults to Shared): only the two named nodes are promoted, however much memory they have."""
    example = yaml.safe_load((EXAMPLES / "kosmos-proposal.yaml").read_text())
    host.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        fake_node("node1", 1), fake_node("node2", 2), fake_node("node-extra", 4)]}))
    host.ensure_namespace(example["metadata"]["namespace"])
    host.run("apply", "-f", str(EXAMPLES / "kosmos-proposal.yaml"))
    wait_phase(host, "tenant1", "tenant1-cluster", "Completed", timeout=150)
    claimed = sorted(n for n, v in claims(host).items() if v == "tenant1.tenant1-cluster")
    assert claimed == ["node1", "node2"]  # 64Gi between them; Dedicated mode would have taken node-extra too
    stored = host.json("get", "vc", "tenant1-cluster", "-n", "tenant1")["spec"]["promoteResources"]
    assert stored["resourcesMode"] == "Shared"
    assert stored["resources"] == example["spec"]["promoteResources"]["resources"]
    host.run("delete", "-f", str(EXAMPLES / "kosmos-proposal.yaml"), "--wait", timeout=120)
    assert_returned(host, claimed)
    host.run("delete", "node", "node1", "node2", "node-extra")


def test_the_kubenest_example_promotes_the_node_it_names_and_keeps_its_dummy_ip_in_the_certificate(
        stack: Stack, host: Kubectl) -> None:
    example = yaml.safe_load((EXAMPLES / "kubenest.yaml").read_text())
    wanted = example["spec"]["promotePolicies"][0]["labelSelector"]["matchLabels"]["kubernetes.io/hostname"]
    ns, name = example["metadata"]["namespace"], example["metadata"]["name"]
    host.run("apply", "-f", "-", input=json.dumps(fake_node(wanted, 3)))
    host.ensure_namespace(ns)
    host.run("apply", "-f", str(EXAMPLES / "kubenest.yaml"))
    wait_phase(host, ns, name, "Completed", timeout=150)
    assert [n for n, v in claims(host).items() if v == f"{ns}.{name}"] == [wanted]
    pem = (stack.root / "tenants" / ns / name / "pki" / "apiserver.crt").read_bytes()
    sans = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert example["spec"]["externalIP"] in {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    host.run("delete", "-f", str(EXAMPLES / "kubenest.yaml"), "--wait", timeout=120)
    assert_returned(host, [wanted])
    host.run("delete", "node", wanted)


def test_competing_clusters_never_share_a_node_and_the_loser_waits(host: Kubectl) -> None:
    ns = host.ensure_namespace("compete")
    overlaps: list[str] = []
    stop = threading.Event()

    def watch_claims() -> None:
        while not stop.is_set():
            try:
                seen: dict[str, str] = {}
                for name in ("first", "second"):
                    obj = host.json("get", "vc", name, "-n", ns)
                    if obj["metadata"].get("deletionTimestamp"):
                        continue  # its status is the record of what it held while it gives nodes back
                    for node in (obj.get("status") or {}).get("nodes") or []:
                        if node["name"] in seen:
                            overlaps.append(node["name"])
                        seen[node["name"]] = name
            except AssertionError:
                pass  # not created yet, or gone
            time.sleep(0.3)

    watcher = threading.Thread(target=watch_claims, daemon=True)
    watcher.start()
    try:
        host.run("create", "-f", "-", input=json.dumps(vc("first", ns, policy(4))))
        wait_phase(host, ns, "first", "Completed")
        host.run("create", "-f", "-", input=json.dumps(vc("second", ns, policy(4))))
        # Pending with the shortage (a new cluster is briefly Pending before its control plane is built, too).
        host.run("wait", "vc/second", "-n", ns, "--for=jsonpath={.status.reason}=InsufficientNodes", "--timeout=120s",
                 timeout=150)
        assert host.json("get", "vc", "second", "-n", ns)["status"]["phase"] == "Pending"
        message = host.json("get", "vc", "second", "-n", ns)["status"]["message"]
        assert "needs 4 node(s)" in message and "2 free" in message, message
        host.run("delete", "vc", "first", "-n", ns, "--wait", timeout=120)
        wait_phase(host, ns, "second", "Completed")
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert overlaps == []
    assert sum(1 for v in claims(host).values() if v == f"{ns}.second") == 4
    host.run("delete", "vc", "second", "-n", ns, "--wait", timeout=120)
    assert_returned(host, list(claims(host)))


def test_host_pods_are_evicted_and_a_pdb_holds_promotion_until_relaxed(host: Kubectl) -> None:
    ns = host.ensure_namespace("drain")
    target = "node-005"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "guarded", "namespace": ns, "labels": {"app": "guarded"}},
           "spec": {"nodeName": target, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    "tolerations": [{"operator": "Exists"}]}}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard", "namespace": ns},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}
    host.run("create", "-f", "-", input=json.dumps(pod))
    host.run("create", "-f", "-", input=json.dumps(pdb))
    host.run("wait", "pod/guarded", "-n", ns, "--for=condition=Ready", "--timeout=60s")
    spec = {"promoteResources": {"nodes": [target]}}
    host.run("create", "-f", "-", input=json.dumps(vc("pinned", ns, spec)))
    deadline = time.monotonic() + 60
    message = ""
    while time.monotonic() < deadline:
        message = (host.json("get", "vc", "pinned", "-n", ns).get("status") or {}).get("message", "")
        if "PodDisruptionBudget" in message:
            break
        time.sleep(1)
    assert "PodDisruptionBudget" in message and "guarded" in message
    host.run("delete", "pdb", "guard", "-n", ns)
    wait_phase(host, ns, "pinned", "Completed")
    assert host.run("get", "pod", "guarded", "-n", ns, check=False).returncode != 0  # evicted
    host.run("delete", "vc", "pinned", "-n", ns, "--wait", timeout=120)
    assert_returned(host, [target])


def test_killed_vc_apiserver_leaves_every_node_in_one_tenant_or_back_home(stack: Stack, host: Kubectl) -> None:
    ns = host.ensure_namespace("crash")
    host.run("create", "-f", "-", input=json.dumps(vc("grow", ns, policy(3))))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(v == f"{ns}.grow" for v in claims(host).values()):
        time.sleep(0.2)
    stack.api.proc.kill()  # in the middle of promoting
    stack.api.start()
    wait_phase(host, ns, "grow", "Completed")
    host.run("delete", "vc", "grow", "-n", ns, "--wait=false")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(v == f"{ns}.grow" for v in claims(host).values()) == 3:
        time.sleep(0.1)
    stack.api.proc.kill()  # in the middle of releasing
    stack.api.start()
    wait_vc(host, ns, "grow", "delete")
    assert not any(claims(host).values())
    assert_returned(host, list(claims(host)))


def pem_bodies(directory: Path) -> dict[str, str]:
    """A distinctive line from the body of every private key under ``directory``."""
    found = {}
    for path in directory.rglob("*.key"):
        lines = path.read_text().splitlines()
        found[str(path)] = lines[len(lines) // 2]
    return found


def test_no_response_log_line_or_event_carries_key_material_or_a_bearer_token(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("hygiene")
    host.run("create", "serviceaccount", "robot", "-n", ns)
    host.run("create", "rolebinding", "robot-admin", "--clusterrole=admin", f"--serviceaccount={ns}:robot", "-n", ns)
    host.run("create", "role", "promoter", "--verb=create", "--resource=virtualclusters.kosmos.io/promote", "-n", ns)
    host.run("create", "rolebinding", "robot-promoter", "--role=promoter", f"--serviceaccount={ns}:robot", "-n", ns)
    token = host.run("create", "token", "robot", "-n", ns).stdout.strip()
    config = pki.kubeconfig(stack.host.url, stack.host.pki.path("ca.crt").read_bytes(), "robot", token=token)
    (tmp_path / "robot.kubeconfig").write_text(json.dumps(config))
    robot = Kubectl(tmp_path / "robot.kubeconfig")
    robot.run("create", "-f", "-", input=json.dumps(vc("keys", ns, policy(1))))
    wait_phase(host, ns, "keys", "Completed")

    def said(*args: str) -> str:
        out = robot.run(*args, check=False)
        return out.stdout + out.stderr

    answers = [said("get", "vc", "keys", "-n", ns, "-o", "json"),
               said("get", "vc", "-A", "-o", "json"),  # forbidden: a Status
               said("get", "vc", "-n", ns, "-o", "wide"),
               said("get", "vc", "-n", ns, "--watch", "--request-timeout=2s", "-o", "json"),
               said("describe", "vc", "keys", "-n", ns),
               said("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/keys/status")]
    assert '"kind": "VirtualCluster"' in answers[0] and "Forbidden" in answers[1]
    kubeconfig = robot.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/keys/kubeconfig").stdout
    events = host.run("get", "events", "-A", "-o", "json").stdout
    log = (stack.root / "log" / "vc-apiserver.log").read_text()

    secrets = pem_bodies(stack.root / "tenants") | pem_bodies(stack.root / "serving")
    assert len(secrets) > 10  # the tenant CAs, service-account key, component keys, serving key
    secrets["encryption key"] = (stack.root / "encryption.key").read_text().strip()
    secrets["bearer token"] = token
    for where, text in [*(("response", a) for a in answers), ("events", events), ("log", log)]:
        assert "PRIVATE KEY" not in text, where
        leaked = [name for name, body in secrets.items() if body in text]
        assert leaked == [], f"{where} carries {leaked}"
    # The kubeconfig hands the caller a key of its own, and nothing of the cluster's.
    user = json.loads(kubeconfig)["users"][0]["user"]
    minted = base64.b64decode(user["client-key-data"]).decode()
    assert "PRIVATE KEY" in minted
    decoded = kubeconfig + base64.b64decode(json.loads(kubeconfig)["clusters"][0]["cluster"]
                                            ["certificate-authority-data"]).decode()
    assert [name for name, body in secrets.items() if body in decoded] == []
    host.run("delete", "vc", "keys", "-n", ns, "--wait", timeout=120)


def test_an_expired_tenant_credential_is_refused(stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("expiry")
    host.run("create", "-f", "-", input=json.dumps(vc("short", ns)))
    wait_phase(host, ns, "short", "Completed")
    issued = json.loads(host.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/short/kubeconfig").stdout)
    files = {p.name: p.read_bytes() for p in (stack.root / "tenants" / ns / "short" / "pki").iterdir()}
    # The same signer the kubeconfig subresource uses, with a lifetime short enough to outlive here.
    pair = TenantPki(files).mint_client("admin", ("kosmos:tenant-admins",),
                                        dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3))
    user = issued["users"][0]["user"]
    user["client-certificate-data"] = base64.b64encode(pair.cert_pem).decode()
    user["client-key-data"] = base64.b64encode(pair.key_pem).decode()
    path = tmp_path / "short.kubeconfig"
    path.write_text(json.dumps(issued))
    assert Kubectl(path).run("get", "ns", "default", "-o", "name").stdout.strip() == "namespace/default"
    time.sleep(4)
    refused = Kubectl(path).run("get", "ns", "default", check=False)
    assert refused.returncode != 0 and "You must be logged in to the server" in refused.stderr
    host.run("delete", "vc", "short", "-n", ns, "--wait", timeout=120)


async def test_a_claim_whose_node_changed_since_the_plan_is_retried_unless_the_spec_no_longer_selects_it(
        stack: Stack, host: Kubectl) -> None:
    owner = {"metadata": {"namespace": "stale", "name": "claimer"}, "spec": policy(2, type="stale-claim")}
    nodes = {name: fake_node(name, 0, labels={"type": "stale-claim"}) for name in ("heartbeat", "relabelled")}
    host.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(nodes.values())}))
    client = KubeClient.from_kubeconfig(stack.kubeconfig)
    promoter = NodePromoter(client, KwokJoiner(ProcessRuntime(stack.root / "unused", BIN)),
                            EventRecorder(None))
    try:
        wait_until(lambda: all(is_ready(host.json("get", "node", n)) for n in nodes), 60, "kwok marks the nodes Ready")
        seen = {n: host.json("get", "node", n) for n in nodes}
        # Both change after the plan read them: one as a heartbeat and the host's node lifecycle controller
        # would (an annotation, an added label), one in the label the spec's selector goes by.
        host.run("annotate", "node", "heartbeat", "example.com/heartbeat=1")
        host.run("label", "node", "heartbeat", "beta.kubernetes.io/os=linux")
        host.run("label", "node", "relabelled", "type=elsewhere", "--overwrite")

        claimed = await promoter.claim(owner, seen["heartbeat"])
        refused = await promoter.claim(owner, seen["relabelled"])

        assert claimed is not None and claim_of(claimed) == "stale/claimer"  # the host's answer to the claim
        assert refused is None
        assert claim_of(host.json("get", "node", "relabelled")) == ""
        await promoter.unclaim(claimed)
        assert claim_of(host.json("get", "node", "heartbeat")) == ""
    finally:
        await client.close()
        host.run("delete", "node", *nodes, "--ignore-not-found")
