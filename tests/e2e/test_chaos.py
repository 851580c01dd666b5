"""vc-apiserver killed at random moments, and the host taken away, while it builds, promotes,
releases and tears down: afterwards everything converges and nothing is left half-done.

Real host with kwok nodes, real tenant control planes (process runtime), real kubectl.
The kill schedule is seeded (``VC_CHAOS_SEED``) so a failing round can be replayed; ``make soak``
(``VC_SOAK=1``) runs 30 rounds instead of 5.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.storage.keys import KeyLayout
from certs import pki
from hack.stack import Stack
from reconciler.nodes.selection import CLAIM_LABEL
from tests.conftest import Kubectl, process_stack, tenant_processes, vc

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
SOAK = os.environ.get("VC_SOAK", "") not in ("", "0")
ROUNDS = 30 if SOAK else 5
SEED = int(os.environ.get("VC_CHAOS_SEED", "20261122"))
NODES = 6
NAMES = ("red", "green", "blue")  # at most 3 clusters × 2 nodes: demand never exceeds the host's 6 nodes
CLAIM_ANNOTATION = "kosmos.io/virtualcluster"
COMPONENTS = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
LEASE = 3
# seconds within which the kill lands after the operation was asked for: about as long as it takes here
SPAN = {"create": 6.0, "delete": 0.8, "scale": 0.8, "kubeconfig": 1.0}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("chaos"), NODES, LEASE)


@pytest.fixture(scope="module")
def host(stack: Stack) -> Kubectl:
    return Kubectl(stack.kubeconfig, host_namespaces=True)


@pytest.fixture(scope="module")
def direct(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """The host admin straight at vc-apiserver: works while the host's aggregator does not."""
    p = stack.host.pki
    config = pki.kubeconfig(stack.api.url, stack.api.serving_ca.read_bytes(), "admin",
                            p.path("admin.crt").read_bytes(), p.path("admin.key").read_bytes())
    path = tmp_path_factory.mktemp("direct") / "direct.kubeconfig"
    path.write_text(json.dumps(config))
    return Kubectl(path)


def say(line: str) -> None:
    print(f"\n  chaos: {line}", end="")


def policy(count: int) -> dict[str, Any]:
    return {"promotePolicies": [{"labelSelector": {"matchLabels": {"type": "kwok"}}, "nodeCount": count}]}


def host_nodes(host: Kubectl) -> list[dict[str, Any]]:
    return [n for n in host.json("get", "nodes")["items"] if n["metadata"]["name"] != "node-control-plane"]


def components(base: Path) -> Counter[str]:
    """Live processes per component in a tenant's directory."""
    return Counter(tenant_processes(base).values())


def converged(stack: Stack, host: Kubectl, ns: str, wanted: dict[str, int]) -> str:
    """Empty when the system is where ``wanted`` says (cluster → node count); else what is not yet."""
    clusters = {o["metadata"]["name"]: o for o in host.json("get", "vc", "-n", ns)["items"]}
    if set(clusters) != set(wanted):
        return f"clusters {sorted(clusters)} != {sorted(wanted)}"
    for name, count in wanted.items():
        status = clusters[name].get("status") or {}
        if status.get("phase") != "Completed" or len(status.get("nodes") or []) != count:
            return f"{name}: {status.get('phase')} with {len(status.get('nodes') or [])}/{count} nodes"
    claimed = Counter(n["metadata"].get("labels", {}).get(CLAIM_LABEL) for n in host_nodes(host))
    for name, count in wanted.items():
        if claimed.get(f"{ns}.{name}", 0) != count:
            return f"{name}: {claimed.get(f'{ns}.{name}', 0)} host nodes claimed, {count} wanted"
    tenants = stack.root / "tenants" / ns
    present = {d.name for d in tenants.iterdir()} if tenants.exists() else set()
    if present != set(wanted):
        return f"control-plane directories {sorted(present)} != {sorted(wanted)}"
    return ""


def settled_on_host(stack: Stack, host: Kubectl, ns: str, wanted: dict[str, int]) -> bool:
    """Whether the host and the tenants' directories already look as ``wanted`` (read while
    vc-apiserver is down: whether a kill landed before the work was done)."""
    claimed = Counter(n["metadata"].get("labels", {}).get(CLAIM_LABEL) for n in host_nodes(host))
    tenants = stack.root / "tenants" / ns
    present = {d.name for d in tenants.iterdir()} if tenants.exists() else set()
    return present == set(wanted) and all(claimed.get(f"{ns}.{name}", 0) == count for name, count in wanted.items()) \
        and sum(v for k, v in claimed.items() if k and k.startswith(f"{ns}.")) == sum(wanted.values())


def assert_invariants(stack: Stack, host: Kubectl, ns: str, wanted: dict[str, int]) -> None:
    """What must hold once converged: one owner per node, one process per component, nothing orphaned."""
    clusters = {o["metadata"]["name"]: o for o in host.json("get", "vc", "-n", ns)["items"]}
    listed: Counter[str] = Counter(n["name"] for o in clusters.values() for n in o["status"].get("nodes") or [])
    assert [n for n, c in listed.items() if c > 1] == [], "a node is listed by two VirtualClusters"
    for node in host_nodes(host):
        meta, spec = node["metadata"], node["spec"]
        claim = meta.get("labels", {}).get(CLAIM_LABEL)
        ours = [t for t in spec.get("taints") or [] if t["key"] == CLAIM_LABEL]
        if claim is None:
            assert not ours and not spec.get("unschedulable"), f"{meta['name']} is cordoned by us without a claim"
            assert CLAIM_ANNOTATION not in meta.get("annotations", {}), meta["name"]
            continue
        if not claim.startswith(f"{ns}."):
            continue  # another test's cluster
        owner = claim.removeprefix(f"{ns}.")
        assert owner in clusters, f"{meta['name']} is claimed by {claim}, which does not exist"
        assert meta["annotations"][CLAIM_ANNOTATION] == f"{ns}/{owner}"
        assert meta["name"] in {n["name"] for n in clusters[owner]["status"]["nodes"]}
        assert [t["value"] for t in ours] == [claim] and spec.get("unschedulable") is True
    for name in wanted:
        running = components(stack.root / "tenants" / ns / name)
        assert running == Counter(dict.fromkeys(COMPONENTS, 1)), f"{name}: {dict(running)}"
        assert not clusters[name]["metadata"].get("deletionTimestamp")


def tenant_nodes(host: Kubectl, ns: str, name: str, tmp: Path) -> set[str]:
    """Ready nodes as the tenant sees them, with a kubeconfig minted now (issuance works after kills)."""
    path = tmp / f"{name}-{time.monotonic_ns()}.kubeconfig"
    path.write_text(host.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/{name}/kubeconfig").stdout)
    return {n["metadata"]["name"] for n in Kubectl(path).json("get", "nodes")["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}


def wait_converged(stack: Stack, host: Kubectl, ns: str, wanted: dict[str, int], timeout: float = 180) -> float:
    start = time.monotonic()
    why = "never checked"
    while time.monotonic() - start < timeout:
        try:
            why = converged(stack, host, ns, wanted)
        except AssertionError as e:  # the aggregator answers 503 while vc-apiserver restarts
            why = str(e).splitlines()[0]
        if not why:
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"not converged after {timeout:.0f}s: {why}\n{stack.api.proc.tail()}")


def test_random_sigkills_of_vc_apiserver_converge_with_nothing_orphaned_or_shared(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    ns = host.ensure_namespace("chaos")
    wanted: dict[str, int] = {}
    say(f"seed {SEED}, {ROUNDS} rounds")
    mid_work = 0
    for round_ in range(ROUNDS):
        free = [n for n in NAMES if n not in wanted]
        choices = (["create"] * 2 if free else []) + (["delete", "scale", "kubeconfig"] if wanted else [])
        op = rng.choice(choices)
        if op == "create":
            name, count = rng.choice(free), rng.randint(1, 2)
            host.run("create", "-f", "-", input=json.dumps(vc(name, ns, policy(count))))
            wanted[name] = count
        elif op == "delete":
            name = rng.choice(sorted(wanted))
            host.run("delete", "vc", name, "-n", ns, "--wait=false")
            del wanted[name]
        elif op == "scale":
            name = rng.choice(sorted(wanted))
            count = 2 if wanted[name] == 1 else 1  # a promotion or a release
            host.run("patch", "vc", name, "-n", ns, "--type", "json", "-p",
                     json.dumps([{"op": "replace", "path": "/spec/promotePolicies/0/nodeCount", "value": count}]))
            wanted[name] = count
        else:
            name = rng.choice(sorted(wanted))
        delay = rng.uniform(0.0, SPAN[op])  # a moment while the work is (most likely) under way
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            if op == "kubeconfig":  # issuance, over and over, until the kill lands in one
                host.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/{name}/kubeconfig", check=False)
            else:
                time.sleep(0.05)
        stack.api.proc.kill()
        busy = not settled_on_host(stack, host, ns, wanted)
        stack.api.start()
        took = wait_converged(stack, host, ns, wanted)
        mid_work += busy
        assert_invariants(stack, host, ns, wanted)
        for cluster in wanted:
            claimed = {n["metadata"]["name"] for n in host_nodes(host)
                       if n["metadata"].get("labels", {}).get(CLAIM_LABEL) == f"{ns}.{cluster}"}
            assert tenant_nodes(host, ns, cluster, tmp_path) == claimed
        say(f"round {round_ + 1}: {op} {name}, killed after {delay:.2f}s {'mid-work' if busy else 'when done'}, converged {took:.1f}s after restart "
            f"({', '.join(f'{k}={v}' for k, v in sorted(wanted.items())) or 'no clusters'})")
    say(f"{mid_work} of {ROUNDS} kills landed while work was under way")
    assert mid_work > 0  # the schedule did hit work in progress
    for name in list(wanted):
        host.run("delete", "vc", name, "-n", ns, "--wait=false")
    wait_converged(stack, host, ns, {})
    assert_invariants(stack, host, ns, {})
    assert not (stack.root / "tenants" / ns).exists() or not list((stack.root / "tenants" / ns).iterdir())


def backoff_delays(log: str, key: str) -> list[float]:
    """The delays of the retries logged for ``key`` because the host or tenant did not answer."""
    pattern = rf"reconcile {re.escape(key)}: waiting for the host or tenant apiserver.*; retrying in ([0-9.]+)s"
    return [float(d) for d in re.findall(pattern, log)]


OUTAGE = 30.0


def test_host_down_for_30s_during_reconciles_is_reported_backed_off_and_recovered(
        stack: Stack, host: Kubectl, direct: Kubectl) -> None:
    ns = host.ensure_namespace("outage")
    host.run("create", "-f", "-", input=json.dumps(vc("steady", ns, policy(1))))
    wait_converged(stack, host, ns, {"steady": 1})
    log_path = stack.root / "log" / "vc-apiserver.log"
    offset = log_path.stat().st_size
    host.run("create", "-f", "-", input=json.dumps(vc("grows", ns, policy(2))))
    direct.run("wait", "vc/grows", "-n", ns, "--for=condition=ControlPlaneReady", "--timeout=120s", timeout=150)
    stack.host.kill_apiserver()
    down_at = time.monotonic()
    try:
        # Nodes cannot be claimed and released without the host; both clusters say so.
        direct.run("patch", "vc", "steady", "-n", ns, "--type", "json", "-p",
                   json.dumps([{"op": "replace", "path": "/spec/promotePolicies/0/nodeCount", "value": 2}]))
        reported: dict[str, Any] = {}
        while time.monotonic() - down_at < OUTAGE:
            for name in ("steady", "grows"):
                obj = direct.json("get", "vc", name, "-n", ns)
                cond = {c["type"]: c for c in obj["status"].get("conditions", [])}
                if cond.get("NodesReady", {}).get("reason") == "HostUnreachable":
                    reported[name] = cond["NodesReady"]
            time.sleep(1)
        assert set(reported) == {"steady", "grows"}, reported
        assert all(c["status"] == "False" and "127.0.0.1" in c["message"] for c in reported.values()), reported
        assert direct.run("get", "--raw", "/readyz").stdout.strip() == "ok"  # serving all along
    finally:
        stack.host.start_apiserver()
    back_at = time.monotonic()
    host.run("wait", "apiservice/v1alpha1.kosmos.io", "--for=condition=Available", "--timeout=90s", timeout=120)
    took = wait_converged(stack, host, ns, {"steady": 2, "grows": 2})
    say(f"host down {back_at - down_at:.1f}s; converged {time.monotonic() - back_at:.1f}s after it came back "
        f"({took:.1f}s after the aggregator was Available)")
    assert_invariants(stack, host, ns, {"steady": 2, "grows": 2})
    log = log_path.read_text()[offset:]
    for key in (f"{ns}/steady", f"{ns}/grows"):
        delays = backoff_delays(log, key)
        say(f"{key}: {len(delays)} retries during the outage, delays {delays}")
        assert 3 <= len(delays) < 40, delays  # retried, but not in a tight loop
        # Exponential (a pass that needed no host in between starts it over), capped at 10 s.
        assert max(delays) >= 5.0 and max(delays) <= 10.0 and delays[-1] >= 5.0, delays
        assert all(b in (a * 2, 10.0) or b == delays[0] for a, b in zip(delays, delays[1:], strict=False)), delays
    assert "Traceback" not in log
    host.run("delete", "vc", "steady", "grows", "-n", ns, "--wait", timeout=180)
    assert_invariants(stack, host, ns, {})


def test_a_virtualcluster_removed_behind_the_servers_back_leaves_no_control_plane_and_no_claim(
        stack: Stack, host: Kubectl) -> None:
    ns = host.ensure_namespace("vanished")
    host.run("create", "-f", "-", input=json.dumps(vc("ghost", ns, policy(1))))
    wait_converged(stack, host, ns, {"ghost": 1})
    stack.api.proc.kill()
    # Gone from storage with its finalizer never run: what an operator's etcdctl del does.
    key = KeyLayout(VIRTUALCLUSTERS.group, VIRTUALCLUSTERS.resource).key(ns, "ghost")
    request = urllib.request.Request(f"{stack.etcd.url}/v3/kv/deleterange", method="POST",
                                     data=json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode())
    with urllib.request.urlopen(request, timeout=10) as r:
        assert json.loads(r.read())["deleted"] == "1"
    stack.api.start()
    took = wait_converged(stack, host, ns, {}, timeout=90)
    say(f"the janitor returned the node and removed the control plane {took:.1f}s after the restart")
    assert_invariants(stack, host, ns, {})
    assert components(stack.root / "tenants" / ns / "ghost") == Counter()
