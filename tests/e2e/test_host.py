"""Behind a real host: APIService, delegated authentication and authorization, RBAC self-service."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from certs import pki
from hack.harness import write_kubeconfig
from hack.stack import Stack
from tests.conftest import Kubectl, vc

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"


def host_kubectl(stack: Stack) -> Kubectl:
    return Kubectl(stack.kubeconfig, host_namespaces=True)


def can_i(k: Kubectl, user: str, verb: str, resource: str, namespace: str) -> bool:
    resource, _, sub = resource.partition("/")
    extra = [f"--subresource={sub}"] if sub else []
    out = k.run("auth", "can-i", verb, resource, *extra, "-n", namespace, "--as", user, check=False)
    return out.stdout.strip() == "yes"


def direct(stack: Stack, path: str, *, cert: tuple[Path, Path] | None = None, method: str = "GET",
           headers: dict[str, str] | None = None, body: Any = None, token: str = "") -> tuple[int, dict[str, Any]]:
    """A request straight to vc-apiserver's port, bypassing the aggregator."""
    ctx = ssl.create_default_context(cafile=str(stack.api.serving_ca))
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(stack.api.url + path, method=method, headers=headers or {},
                                 data=json.dumps(body).encode() if body is not None else None)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture(scope="module")
def teams(host_stack: Stack) -> Kubectl:
    """team-a: alice is admin, bob is view; team-b: nobody; a ServiceAccount robot with edit in team-a."""
    k = host_kubectl(host_stack)
    for ns in ("team-a", "team-b"):
        k.ensure_namespace(ns)
    k.run("create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", "team-a")
    k.run("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", "team-a")
    k.run("create", "serviceaccount", "robot", "-n", "team-a")
    k.run("create", "rolebinding", "robot-edit", "--clusterrole=edit", "--serviceaccount=team-a:robot", "-n", "team-a")
    deadline = time.monotonic() + 30  # the clusterrole aggregation controller fills admin/edit/view
    while time.monotonic() < deadline and not can_i(k, "alice", "create", "virtualclusters", "team-a"):
        time.sleep(0.5)
    return k


def test_apiservice_is_available(host_stack: Stack) -> None:
    k = host_kubectl(host_stack)
    conditions = k.json("get", "apiservice", "v1alpha1.kosmos.io")["status"]["conditions"]
    assert {"type": "Available", "status": "True"}.items() <= next(
        c for c in conditions if c["type"] == "Available").items()


def test_bringing_up_a_running_stack_again_starts_nothing_and_keeps_it_available(host_stack: Stack) -> None:
    """What a second ``make up`` does: a new process over the same directory finds everything healthy."""
    again = Stack(host_stack.root, host_stack.ports, runtime=host_stack.runtime, run_dir=host_stack.run_dir,
                  extra_args=host_stack.extra_args)
    assert again.up(nodes=2) == []
    test_apiservice_is_available(host_stack)


def test_namespace_admin_manages_virtual_clusters_in_their_namespace(teams: Kubectl) -> None:
    as_alice = ("--as", "alice", "-n", "team-a")
    teams.run("create", "-f", "-", *as_alice, input=json.dumps(vc("alice-vc", "team-a")))
    assert "alice-vc" in teams.run("get", "vc", *as_alice).stdout
    teams.run("patch", "vc", "alice-vc", *as_alice, "--type", "merge", "-p", '{"metadata":{"labels":{"a":"b"}}}')
    kubeconfig = teams.run("get", "--raw", f"{GV}/namespaces/team-a/virtualclusters/alice-vc/kubeconfig",
                           "--as", "alice", check=False)
    assert kubeconfig.returncode != 0 and "is not ready" in kubeconfig.stderr  # 409, never 403
    assert "Forbidden" not in kubeconfig.stderr
    teams.run("delete", "vc", "alice-vc", *as_alice, "--wait", timeout=60)
    assert can_i(teams, "alice", "create", "virtualclusters", "team-a")
    assert can_i(teams, "alice", "get", "virtualclusters/kubeconfig", "team-a")


def test_namespace_admin_is_forbidden_in_another_namespace(teams: Kubectl) -> None:
    out = teams.run("create", "-f", "-", "--as", "alice", "-n", "team-b", input=json.dumps(vc("x", "team-b")),
                    check=False)
    assert out.returncode != 0
    assert 'User "alice" cannot create resource "virtualclusters" in API group "kosmos.io" in the namespace ' \
           '"team-b"' in out.stderr
    assert not can_i(teams, "alice", "create", "virtualclusters", "team-b")


def test_viewer_lists_but_cannot_create_or_fetch_kubeconfig(teams: Kubectl) -> None:
    teams.run("create", "-f", "-", "-n", "team-a", input=json.dumps(vc("viewed", "team-a")))
    assert "viewed" in teams.run("get", "vc", "-n", "team-a", "--as", "bob").stdout
    create = teams.run("create", "-f", "-", "--as", "bob", "-n", "team-a", input=json.dumps(vc("nope", "team-a")),
                       check=False)
    assert create.returncode != 0 and "Forbidden" in create.stderr
    raw = teams.run("get", "--raw", f"{GV}/namespaces/team-a/virtualclusters/viewed/kubeconfig", "--as", "bob",
                    check=False)
    assert raw.returncode != 0 and "Forbidden" in raw.stderr
    assert can_i(teams, "bob", "list", "virtualclusters", "team-a")
    assert not can_i(teams, "bob", "create", "virtualclusters", "team-a")
    assert not can_i(teams, "bob", "get", "virtualclusters/kubeconfig", "team-a")


def test_service_account_token_works_through_the_host_and_directly(host_stack: Stack, teams: Kubectl,
                                                                  tmp_path: Path) -> None:
    token = teams.run("create", "token", "robot", "-n", "team-a").stdout.strip()
    config = pki.kubeconfig(host_stack.host.url, host_stack.host.pki.path("ca.crt").read_bytes(), "robot",
                            token=token)
    robot = Kubectl(write_kubeconfig(tmp_path / "robot.kubeconfig", config))
    via_host = robot.run("get", "vc", "-n", "team-a", check=False)
    assert via_host.returncode == 0, via_host.stderr
    status, body = direct(host_stack, f"{GV}/namespaces/team-a/virtualclusters", token=token)
    assert status == 200 and body["kind"] == "VirtualClusterList"
    status, body = direct(host_stack, f"{GV}/namespaces/team-b/virtualclusters", token=token)
    assert status == 403 and "system:serviceaccount:team-a:robot" in body["message"]
    status, _ = direct(host_stack, f"{GV}/namespaces/team-a/virtualclusters", token="not-a-token")
    assert status == 401


def _cert(directory: Path, stem: str, pair: pki.KeyPair) -> tuple[Path, Path]:
    return pair.write(directory, stem)


def test_spoofed_identities_sent_straight_to_the_server_are_refused(host_stack: Stack, tmp_path: Path) -> None:
    host = host_stack.host.pki
    spoof = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    create_path = f"{GV}/namespaces/team-a/virtualclusters"
    body = vc("spoofed", "team-a")
    host_ca = pki.KeyPair.read(host.dir, "ca")
    front_ca = pki.KeyPair.read(host.dir, "front-proxy-ca")
    mallory = _cert(tmp_path, "mallory", pki.new_leaf(host_ca, "mallory"))
    proxy_impostor = _cert(tmp_path, "impostor", pki.new_leaf(front_ca, "not-the-front-proxy"))
    stranger = _cert(tmp_path, "stranger", pki.new_leaf(pki.new_ca("unknown-ca"), "admin",
                                                          organizations=["system:masters"]))

    status, _ = direct(host_stack, create_path, headers=spoof, method="POST", body=body)
    assert status == 401  # headers without the front proxy's certificate
    status, answer = direct(host_stack, create_path, cert=mallory, headers=spoof, method="POST", body=body)
    assert status == 403 and 'User "mallory"' in answer["message"]  # the certificate's user, not the header's
    status, _ = direct(host_stack, create_path, cert=proxy_impostor, headers=spoof, method="POST", body=body)
    assert status == 401  # front-proxy CA, but a CN that is not allowed
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        direct(host_stack, create_path, cert=stranger, headers=spoof, method="POST", body=body)
    k = host_kubectl(host_stack)
    assert "spoofed" not in k.run("get", "vc", "-n", "team-a", "-o", "name").stdout


def test_front_proxy_identity_is_honoured_only_from_the_front_proxy(host_stack: Stack) -> None:
    host = host_stack.host.pki
    proxy = (host.path("front-proxy-client.crt"), host.path("front-proxy-client.key"))
    status, body = direct(host_stack, f"{GV}/namespaces/team-b/virtualclusters", cert=proxy,
                          headers={"X-Remote-User": "carol", "X-Remote-Group": "devs"})
    assert status == 403 and 'User "carol"' in body["message"]


def test_creating_in_a_missing_or_terminating_namespace_is_refused(host_stack: Stack) -> None:
    k = host_kubectl(host_stack)
    missing = k.run("create", "-f", "-", input=json.dumps(vc("x", "no-such-namespace")), check=False)
    assert missing.returncode != 0 and 'namespaces "no-such-namespace" not found' in missing.stderr


def test_deleting_a_namespace_deletes_its_virtual_clusters(host_stack: Stack) -> None:
    k = host_kubectl(host_stack)
    k.ensure_namespace("doomed")
    for name in ("d1", "d2"):
        k.run("create", "-f", "-", input=json.dumps(vc(name, "doomed")))
    k.run("delete", "namespace", "doomed", "--wait", "--timeout=120s", timeout=150)
    assert "doomed" not in k.run("get", "ns", "-o", "name").stdout
    status, body = direct(host_stack, f"{GV}/namespaces/doomed/virtualclusters",
                          cert=(host_stack.host.pki.path("admin.crt"), host_stack.host.pki.path("admin.key")))
    assert status == 200 and body["items"] == []


def test_host_outage_keeps_cached_decisions_and_recovers(host_stack: Stack, teams: Kubectl) -> None:
    token = teams.run("create", "token", "robot", "-n", "team-a").stdout.strip()
    path = f"{GV}/namespaces/team-a/virtualclusters"
    assert direct(host_stack, path, token=token)[0] == 200  # now cached for 10 s
    host_stack.host.kill_apiserver()
    try:
        assert direct(host_stack, path, token=token)[0] == 200  # cached authentication and authorization
        status, body = direct(host_stack, f"{GV}/namespaces/team-b/virtualclusters", token=token)
        assert status == 503 and body["kind"] == "Status"  # a decision nobody can make right now
    finally:
        host_stack.host.start_apiserver()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if direct(host_stack, f"{GV}/namespaces/team-b/virtualclusters", token=token)[0] == 403:
            break
        time.sleep(1)
    assert direct(host_stack, f"{GV}/namespaces/team-b/virtualclusters", token=token)[0] == 403
    host_kubectl(host_stack).run("wait", "apiservice/v1alpha1.kosmos.io", "--for=condition=Available",
                                 "--timeout=60s", timeout=90)
