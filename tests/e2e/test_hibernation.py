"""Hibernation on a real host with kwok nodes, real tenant control planes (process runtime), real kubectl:
asked for by the spec, or by itself after inactivity; woken by the spec, by a kubeconfig fetch, or by
the wake annotation. Everything goes through the host's aggregator, as users reach it."""

from __future__ import annotations

import datetime as dt
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.stack import Stack
from reconciler.nodes.selection import CLAIM_LABEL
from reconciler.runtime.process import ProcessRuntime
from tests.conftest import EXAMPLES, Kubectl, process_stack, tenant_processes, vc
from tests.support import report

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
NODES = 4
IDLE = 20  # seconds of afterInactivity in the inactivity tests


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("hibernation"), NODES, 5)


@pytest.fixture(scope="module")
def host(stack: Stack) -> Kubectl:
    return Kubectl(stack.kubeconfig, host_namespaces=True)


def policy(count: int) -> dict[str, Any]:
    return {"promotePolicies": [{"labelSelector": {"matchLabels": {"type": "kwok"}}, "nodeCount": count}]}


def claimed_by(host: Kubectl, ns: str, name: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in host.json("get", "nodes")["items"]
                  if n["metadata"].get("labels", {}).get(CLAIM_LABEL) == f"{ns}.{name}")


def assert_returned(host: Kubectl, names: list[str]) -> None:
    """Back in the host as on delete: no claim label, no taint of ours, schedulable."""
    for node in host.json("get", "nodes")["items"]:
        if node["metadata"]["name"] in names:
            assert CLAIM_LABEL not in node["metadata"].get("labels", {}), node["metadata"]["name"]
            assert not [t for t in node["spec"].get("taints", []) if t["key"] == CLAIM_LABEL]
            assert not node["spec"].get("unschedulable"), node["metadata"]["name"]


def kubeconfig_path(ns: str, name: str) -> str:
    return f"{GV}/namespaces/{ns}/virtualclusters/{name}/kubeconfig"


def tenant(host: Kubectl, ns: str, name: str, tmp_path: Path) -> Kubectl:
    path = tmp_path / f"{ns}-{name}-{time.monotonic_ns()}.kubeconfig"
    path.write_text(host.run("get", "--raw", kubeconfig_path(ns, name)).stdout)
    return Kubectl(path)


def get(host: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return host.json("get", "vc", name, "-n", ns)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"].get("conditions", [])}


def wait_phase(host: Kubectl, ns: str, name: str, phase: str, timeout: int = 120) -> None:
    host.run("wait", f"vc/{name}", "-n", ns, f"--for=jsonpath={{.status.phase}}={phase}", f"--timeout={timeout}s",
             timeout=timeout + 30)


def wait_ready(host: Kubectl, ns: str, name: str, timeout: int = 180) -> None:
    host.run("wait", f"vc/{name}", "-n", ns, "--for=condition=Ready", f"--timeout={timeout}s", timeout=timeout + 30)


def raw_get(stack: Stack, path: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    """GET through the host's aggregator as its admin: status, headers and JSON body, errors included."""
    pki = stack.host.pki
    ctx = ssl.create_default_context(cafile=str(pki.path("ca.crt")))
    ctx.load_cert_chain(str(pki.path("admin.crt")), str(pki.path("admin.key")))
    request = urllib.request.Request(stack.host.url + path, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def tenant_dir(stack: Stack, ns: str, name: str) -> Path:
    return stack.root / "tenants" / ns / name


def test_hibernation_stops_the_control_plane_keeps_its_data_and_returns_its_nodes_until_woken(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("hib")
    host.run("create", "-f", "-", input=json.dumps(vc("sleepy", ns, policy(2))))
    wait_phase(host, ns, "sleepy", "Completed")
    endpoint = get(host, ns, "sleepy")["status"]["controlPlaneEndpoint"]
    claimed = claimed_by(host, ns, "sleepy")
    assert len(claimed) == 2
    t = tenant(host, ns, "sleepy", tmp_path)
    t.run("create", "configmap", "kept", "--from-literal=answer=42")
    base = tenant_dir(stack, ns, "sleepy")
    assert sorted(tenant_processes(base).values()) == ["etcd", "kube-apiserver", "kube-controller-manager",
                                                       "kube-scheduler", "kwok"]

    started = time.monotonic()
    host.run("patch", "vc", "sleepy", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": True}}}))
    wait_phase(host, ns, "sleepy", "Hibernated")
    hibernated_in = time.monotonic() - started
    assert tenant_processes(base) == {}, "every process of the tenant, kwok included, is stopped"
    assert (base / "etcd" / "member").is_dir() and (base / "state.json").exists(), "its data is kept"
    assert_returned(host, claimed)
    obj = get(host, ns, "sleepy")
    assert obj["spec"]["hibernation"] == {"hibernated": True, "wakeOnAccess": True}
    assert obj["status"]["nodes"] == []
    conds = conditions(obj)
    assert (conds["Hibernated"]["status"], conds["Hibernated"]["reason"]) == ("True", "Hibernated")
    assert all(conds[t]["status"] == "False" for t in ("ControlPlaneReady", "NodesReady", "Ready"))
    row = host.run("get", "vc", "sleepy", "-n", ns).stdout.splitlines()[1].split()
    assert row[:4] == ["sleepy", "Hibernated", "False", "0/2"]
    events = host.run("get", "events", "-n", ns, "--field-selector", "involvedObject.name=sleepy").stdout
    assert "Hibernating" in events and "Hibernated" in events
    # only the spec wakes what the spec put to sleep: the kubeconfig says so and wakes nothing
    out = host.run("get", "--raw", kubeconfig_path(ns, "sleepy"), check=False)
    assert out.returncode != 0
    assert ('virtualclusters.kosmos.io "sleepy" is hibernated: spec.hibernation.hibernated is true; set it to false '
            'to wake it') in out.stderr
    time.sleep(2)
    assert get(host, ns, "sleepy")["status"]["phase"] == "Hibernated" and tenant_processes(base) == {}

    started = time.monotonic()
    host.run("patch", "vc", "sleepy", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": False}}}))
    wait_ready(host, ns, "sleepy")
    woken_in = time.monotonic() - started
    # the same endpoint and CA: the credential fetched before hibernation still works, and every object is there
    assert t.json("get", "configmap", "kept")["data"] == {"answer": "42"}
    obj = get(host, ns, "sleepy")
    assert obj["status"]["controlPlaneEndpoint"] == endpoint and obj["status"]["phase"] == "Completed"
    assert (conditions(obj)["Hibernated"]["status"], conditions(obj)["Hibernated"]["reason"]) == ("False", "Awake")
    again = claimed_by(host, ns, "sleepy")
    assert len(again) == 2, "nodes are promoted again by the same policy"
    assert sorted(n["metadata"]["name"] for n in t.json("get", "nodes")["items"]) == again
    report.say(f"hibernation (process runtime, 2 nodes): hibernate {hibernated_in:.1f}s, wake -> Ready {woken_in:.1f}s")
    host.run("delete", "vc", "sleepy", "-n", ns, "--wait", timeout=120)
    assert not base.exists()
    assert_returned(host, again)


def test_waking_with_too_few_free_nodes_waits_in_pending_saying_so(stack: Stack, host: Kubectl) -> None:
    ns = host.ensure_namespace("hib-short")
    host.run("create", "-f", "-", input=json.dumps(vc("first", ns, {**policy(2), "hibernation": {}})))
    wait_phase(host, ns, "first", "Completed")
    host.run("patch", "vc", "first", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": True}}}))
    wait_phase(host, ns, "first", "Hibernated")
    # while it sleeps, another cluster takes every free worker but one
    free = len([n for n in host.json("get", "nodes", "-l", "type=kwok,!node-role.kubernetes.io/control-plane")["items"]
                if not n["metadata"].get("labels", {}).get(CLAIM_LABEL)])
    host.run("create", "-f", "-", input=json.dumps(vc("taker", ns, policy(free - 1))))
    wait_phase(host, ns, "taker", "Completed")
    host.run("patch", "vc", "first", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": False}}}))
    wait_phase(host, ns, "first", "Pending")
    obj = get(host, ns, "first")
    assert obj["status"]["reason"] == "InsufficientNodes"
    assert "promotePolicies[0] needs 2 node(s) matching type=kwok, 1 available (1 free)" in obj["status"]["message"]
    assert conditions(obj)["ControlPlaneReady"]["status"] == "True"
    host.run("delete", "vc", "taker", "-n", ns, "--wait", timeout=120)
    wait_ready(host, ns, "first")
    claimed = claimed_by(host, ns, "first")
    assert len(claimed) == 2
    # a hibernated cluster is deleted as any other: nothing of it is left
    host.run("patch", "vc", "first", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": True}}}))
    wait_phase(host, ns, "first", "Hibernated")
    host.run("delete", "vc", "first", "-n", ns, "--wait", timeout=120)
    assert not tenant_dir(stack, ns, "first").exists()
    assert_returned(host, claimed)


def test_an_idle_tenant_hibernates_by_itself_and_a_kubeconfig_fetch_wakes_it(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("idle")
    host.run("create", "-f", "-", input=json.dumps(vc("idle", ns, {**policy(1),
                                                                   "hibernation": {"afterInactivity": f"{IDLE}s"}})))
    wait_ready(host, ns, "idle")
    assert get(host, ns, "idle")["spec"]["hibernation"] == {"afterInactivity": f"{IDLE}s", "wakeOnAccess": True}
    t = tenant(host, ns, "idle", tmp_path)
    t.run("create", "configmap", "before-sleep", "--from-literal=k=v")
    # a user at work keeps it awake well past afterInactivity, the tenant's node (kwok), controllers and this
    # server talking to it all the while
    deadline = time.monotonic() + IDLE * 1.6
    while time.monotonic() < deadline:
        t.run("get", "configmaps")
        assert get(host, ns, "idle")["status"]["phase"] == "Completed"
        time.sleep(4)
    t.run("get", "configmaps")
    last_request = time.monotonic()
    # then nothing but that machinery: it goes to sleep once afterInactivity has passed
    wait_phase(host, ns, "idle", "Hibernated", timeout=IDLE + 60)
    asleep_after = time.monotonic() - last_request
    assert asleep_after >= IDLE - 1, f"hibernated {asleep_after:.1f}s after the last user request"
    obj = get(host, ns, "idle")
    assert obj["spec"]["hibernation"] == {"afterInactivity": f"{IDLE}s", "wakeOnAccess": True}, "spec untouched"
    hibernated = conditions(obj)["Hibernated"]
    assert (hibernated["status"], hibernated["reason"]) == ("True", "Inactive")
    assert "no request from a user since" in hibernated["message"]
    assert "fetching its kubeconfig wakes it" in hibernated["message"]
    assert tenant_processes(tenant_dir(stack, ns, "idle")) == {}
    assert claimed_by(host, ns, "idle") == []

    # the fetch wakes it: 409 Conflict, worded as a Go apiserver words it, with how long it takes
    code, headers, body = raw_get(stack, kubeconfig_path(ns, "idle"))
    estimate = ProcessRuntime.WAKE_ESTIMATE
    assert (code, headers.get("Retry-After")) == (409, str(estimate))
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Conflict", "code": 409,
        "message": f'virtualclusters.kosmos.io "idle" is waking up from hibernation: its control plane is usually '
                   f'ready in about {estimate}s (its nodes follow); retry then, or wait with kubectl wait '
                   f'--for=condition=Ready',
        "details": {"name": "idle", "group": "kosmos.io", "kind": "virtualclusters", "retryAfterSeconds": estimate}}
    woke = time.monotonic()
    assert "kosmos.io/wake-requested" in get(host, ns, "idle")["metadata"]["annotations"]
    out = host.run("get", "--raw", kubeconfig_path(ns, "idle"), check=False)  # kubectl shows the same answer
    assert out.returncode != 0 and "is waking up from hibernation" in out.stderr
    wait_ready(host, ns, "idle")
    woken_in = time.monotonic() - woke
    t = tenant(host, ns, "idle", tmp_path)
    assert t.json("get", "configmap", "before-sleep")["data"] == {"k": "v"}
    assert len(claimed_by(host, ns, "idle")) == 1
    report.say(f"inactivity: hibernated {asleep_after:.1f}s after the last user request (afterInactivity {IDLE}s); "
               f"kubeconfig fetch -> Ready {woken_in:.1f}s")

    # without wakeOnAccess a fetch only says how to wake it; the annotation does
    host.run("patch", "vc", "idle", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"hibernation": {"wakeOnAccess": False}}}))
    wait_phase(host, ns, "idle", "Hibernated", timeout=IDLE + 60)
    out = host.run("get", "--raw", kubeconfig_path(ns, "idle"), check=False)
    assert out.returncode != 0
    assert ("is hibernated after inactivity and spec.hibernation.wakeOnAccess is false: to wake it, set the "
            "annotation kosmos.io/wake-requested to the current time (RFC 3339)") in out.stderr
    time.sleep(2)
    assert get(host, ns, "idle")["status"]["phase"] == "Hibernated"
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    host.run("annotate", "vc", "idle", "-n", ns, f"kosmos.io/wake-requested={now}", "--overwrite")
    wait_ready(host, ns, "idle")
    host.run("delete", "vc", "idle", "-n", ns, "--wait", timeout=120)


def test_hibernation_fields_are_validated_defaulted_and_explained(host: Kubectl) -> None:
    ns = host.ensure_namespace("hib-api")
    bad = vc("bad", ns, {"hibernation": {"hibernated": "yes", "afterInactivity": "soon"}})
    out = host.run("create", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0
    assert 'The VirtualCluster "bad" is invalid' in out.stderr
    assert ('spec.hibernation.hibernated: Invalid value: "string": spec.hibernation.hibernated in body must be of '
            'type boolean: "string"') in out.stderr
    assert ('spec.hibernation.afterInactivity: Invalid value: "soon": spec.hibernation.afterInactivity in body must '
            'be of type duration: "soon"') in out.stderr
    out = host.run("create", "-f", "-", check=False,
                   input=json.dumps(vc("zero", ns, {"hibernation": {"afterInactivity": "0s"}})))
    assert 'spec.hibernation.afterInactivity: Invalid value: "0s": must be a positive duration' in out.stderr
    created = json.loads(host.run("create", "--dry-run=server", "-o", "json", "-f", "-",
                                  input=json.dumps(vc("ok", ns, {"hibernation": {}}))).stdout)
    assert created["spec"]["hibernation"] == {"wakeOnAccess": True}
    explained = host.run("explain", "virtualclusters.spec.hibernation").stdout
    for text in ("afterInactivity\t<string>", "hibernated\t<boolean>", "wakeOnAccess\t<boolean>",
                 "a Go duration such as 30m"):
        assert text in explained, explained
    for example in sorted(EXAMPLES.glob("*.yaml")):  # what applied before still applies, unchanged
        host.ensure_namespace(yaml.safe_load(example.read_text())["metadata"].get("namespace", "default"))
        host.run("apply", "--dry-run=server", "-f", str(example))


def converged(stack: Stack, host: Kubectl, ns: str, name: str, asleep: bool) -> str:
    """Empty once the cluster, its processes and its node claims are all where ``asleep`` says; else what is not."""
    try:
        obj = get(host, ns, name)
    except AssertionError as e:  # the aggregator answers 503 while vc-apiserver restarts
        return str(e).splitlines()[0]
    status = obj.get("status") or {}
    running = sorted(tenant_processes(tenant_dir(stack, ns, name)).values())
    claimed = claimed_by(host, ns, name)
    if asleep:
        if status.get("phase") != "Hibernated" or running or claimed or status.get("nodes"):
            return f"{status.get('phase')}: running {running}, claimed {claimed}"
        return ""
    if status.get("phase") != "Completed" or len(claimed) != 1 or [n["name"] for n in status["nodes"]] != claimed:
        return f"{status.get('phase')}: claimed {claimed}, listed {status.get('nodes')}"
    if running != ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]:
        return f"running {running}"
    return ""


def test_vc_apiserver_killed_mid_hibernate_and_mid_wake_converges(stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("hib-kill")
    host.run("create", "-f", "-", input=json.dumps(vc("tough", ns, policy(1))))
    wait_phase(host, ns, "tough", "Completed")
    tenant(host, ns, "tough", tmp_path).run("create", "configmap", "kept", "--from-literal=k=v")
    mid_work = {True: 0, False: 0}
    for hibernate_after, wake_after in ((0.3, 0.5), (0.9, 2.0)):
        for asleep, delay in ((True, hibernate_after), (False, wake_after)):
            host.run("patch", "vc", "tough", "-n", ns, "--type", "merge", "-p",
                     json.dumps({"spec": {"hibernation": {"hibernated": asleep}}}))
            time.sleep(delay)
            stack.api.proc.kill()
            busy = bool(converged(stack, host, ns, "tough", asleep))  # the host and the processes tell, meanwhile
            mid_work[asleep] += busy
            stack.api.start()
            started, why = time.monotonic(), "never checked"
            while time.monotonic() - started < 120:
                if not (why := converged(stack, host, ns, "tough", asleep)):
                    break
                time.sleep(0.5)
            assert not why, f"{'hibernate' if asleep else 'wake'} killed after {delay}s: not converged: {why}"
            report.say(f"{'hibernate' if asleep else 'wake'} killed after {delay}s "
                       f"{'mid-work' if busy else 'when done'}: converged {time.monotonic() - started:.1f}s after "
                       f"the restart")
        t = tenant(host, ns, "tough", tmp_path)
        assert t.json("get", "configmap", "kept")["data"] == {"k": "v"}
        assert [n["metadata"]["name"] for n in t.json("get", "nodes")["items"]] == claimed_by(host, ns, "tough")
    assert mid_work[True] and mid_work[False], f"kills that landed mid-work: {mid_work}"
    host.run("delete", "vc", "tough", "-n", ns, "--wait", timeout=120)
