"""The node agent for real: a kubelet stand-in moved from a host kube-apiserver into a tenant and back.

One module-wide world: a host (etcd + kube-apiserver with Node,RBAC and NodeRestriction), vc-apiserver
with the process runtime and ``--node-joiner=agent``, one VirtualCluster's tenant control plane, the
node agent as a subprocess over a temporary copy of a kubeadm-like kubelet layout (installed as its
static pod would be, with the installer's certificates), and a kubelet stand-in
(hack/kubelet_standin.py) that the agent's restart command restarts. Every test starts and
ends with the node on the host.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import http.client
import json
import os
import shlex
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.kubeclient.client import HostError, KubeClient
from apiserver.storage.secrets import SecretStore, generate_key_file, load_key_file, load_pki
from apiservice import tls
from apiservice.manifests import agent_secrets
from certs import pki
from certs.tenant import TenantPki
from hack.harness import (
    BIN,
    REPO,
    ApiServer,
    Etcd,
    HostCluster,
    HostPki,
    Pki,
    Proc,
    free_port,
    wait_until,
    write_kubeconfig,
)
from reconciler.nodeagent import CLIENT_CN, protocol, staticpod
from reconciler.nodeagent.files import KUBEADM, KubeletPaths
from reconciler.nodes.agentjoiner import AgentAccess, AgentJoiner, agent_client_context
from reconciler.runtime.process.supervisor import processes_under
from reconciler.tenantapi import admin_client
from tests.conftest import Kubectl, start_etcd, vc

pytestmark = pytest.mark.e2e

NODE = "edge-node-1"
NS, NAME = "default", "edge"
OWNER = f"{NS}/{NAME}"
GV = "/apis/kosmos.io/v1alpha1"


# -- the node's files -----------------------------------------------------------------------

@dataclass
class NodeFiles:
    """A kubeadm-like kubelet layout: kubelet.conf, pki/ca.crt and a kubelet-client-current.pem symlink."""

    root: Path

    @property
    def paths(self) -> KubeletPaths:
        return KUBEADM.under(self.root)

    @property
    def kubeconfig(self) -> Path:
        return self.paths.kubeconfig

    @property
    def ca(self) -> Path:
        return self.paths.ca

    @property
    def credential(self) -> Path:
        return self.paths.credential

    def create(self, host: HostCluster) -> None:
        """The host's files: the kubelet is system:node:NODE of the host, its certificate by a symlink."""
        ca = pki.KeyPair.read(host.pki.dir, "ca")
        node = pki.new_leaf(ca, protocol.node_user(NODE), organizations=[protocol.NODES_GROUP])
        dated = self.credential.with_name("kubelet-client-2025-01-01-00-00-00.pem")
        dated.parent.mkdir(parents=True)
        dated.write_bytes(node.cert_pem + node.key_pem)
        dated.chmod(0o600)
        self.credential.symlink_to(dated)
        self.ca.parent.mkdir(parents=True)
        self.ca.write_bytes(ca.cert_pem)
        config = pki.kubeconfig(host.url, ca.cert_pem, protocol.node_user(NODE), cluster="host")
        config["users"][0]["user"] = {"client-certificate": str(self.credential), "client-key": str(self.credential)}
        write_kubeconfig(self.kubeconfig, config)

    def snapshot(self) -> dict[str, tuple[str, Any, int]]:
        """Every managed path exactly: a symlink's target, or a file's bytes and mode."""
        out: dict[str, tuple[str, Any, int]] = {}
        for path in (self.kubeconfig, self.ca, self.credential):
            if path.is_symlink():
                out[str(path)] = ("symlink", os.readlink(path), 0)
            else:
                out[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
        return out

    def server(self) -> str:
        return yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]


# -- the agent ----------------------------------------------------------------------------------

@dataclass
class AgentCerts:
    """The node agent's PKI exactly as the installer makes it (``python -m apiservice certs --node-joiner
    agent``), plus clients it must refuse."""

    dir: Path

    @classmethod
    def create(cls, directory: Path) -> AgentCerts:
        tls.ensure_node_agent(tls.CertDir(directory))
        client_ca = pki.KeyPair.read(directory, tls.AGENT_CLIENT_CA)
        pki.new_leaf(client_ca, "system:kube-scheduler").write(directory, "intruder")  # right CA, wrong name
        pki.new_leaf(pki.new_ca("someone-else"), CLIENT_CN).write(directory, "stranger")  # right name, wrong CA
        return cls(directory)

    @property
    def agent_ca(self) -> Path:
        """What vc-apiserver verifies agents with (--node-agent-ca-file)."""
        return self.dir / f"{tls.AGENT_CA}.crt"

    @property
    def client_ca(self) -> Path:
        """What agents verify clients with (--client-ca)."""
        return self.dir / f"{tls.AGENT_CLIENT_CA}.crt"

    def files(self, stem: str) -> tuple[str, str]:
        stem = {"serving": tls.AGENT_SERVING, "reconciler": tls.AGENT_CLIENT}.get(stem, stem)
        return str(self.dir / f"{stem}.crt"), str(self.dir / f"{stem}.key")

    def ssl(self, client: str | None = "reconciler", version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
        """The joiner's own TLS: the agent CA and the pinned name, whatever address is dialled."""
        ctx = agent_client_context(self.agent_ca, *(self.files(client) if client else (None, None)))
        if version is not None:
            ctx.minimum_version = ctx.maximum_version = version
        return ctx


def standin_command(root: Path, files: NodeFiles) -> list[str]:
    return [sys.executable, "-m", "hack.kubelet_standin", "restart", "--pidfile", str(root / "standin.pid"),
            "--log", str(root / "standin.log"), "--kubeconfig", str(files.kubeconfig), "--node-name", NODE,
            "--cpu", "8", "--memory", "16Gi", "--heartbeat", "1"]


def agent_proc(root: Path, certs: AgentCerts, files: NodeFiles, port: int, restart: list[str],
               serving: str = "serving") -> Proc:
    cert, key = certs.files(serving)
    return Proc("node-agent", [
        sys.executable, "-m", "reconciler.nodeagent", "--listen", f"127.0.0.1:{port}", "--tls-cert", cert,
        "--tls-key", key, "--client-ca", str(certs.client_ca), "--node-name", NODE,
        "--state-dir", str(root / "agent-state"), "--kubelet-kubeconfig", str(files.kubeconfig),
        "--kubelet-ca", str(files.ca), "--kubelet-client-cert", str(files.credential),
        "--restart-command", shlex.join(restart), "--restart-timeout", "40"], root / "agent.log")


def static_pod_agent(root: Path, certs: AgentCerts, files: NodeFiles, port: int, restart: list[str]) -> Proc:
    """The agent as the node runs it: the installer copies the TLS files of the Secret that
    ``python -m apiservice`` renders and writes the static pod; the container's command and flags are
    run as they are, listening on loopback only."""
    [secret] = [s for s in agent_secrets("local", tls.CertDir(certs.dir))
                if s["metadata"]["name"] == "kosmos-node-agent-tls"]
    mounted = root / "secret"  # as the kubelet mounts it into the installer
    mounted.mkdir()
    for key, value in secret["data"].items():
        (mounted / key).write_bytes(base64.b64decode(value))
    (root / "manifests").mkdir()
    spec = staticpod.AgentPod("unused", NODE, port, root / "agent-tls", root / "agent-state",
                              files.paths, shlex.join(restart), 40)
    staticpod.install(spec, mounted, root / "manifests")
    pod = yaml.safe_load((root / "manifests" / staticpod.MANIFEST).read_text())
    [container] = pod["spec"]["containers"]
    args = [f"--listen=127.0.0.1:{port}" if a.startswith("--listen=") else a for a in container["args"]]
    return Proc("node-agent", [sys.executable, *container["command"][1:], *args], root / "agent.log")


def call(port: int, ctx: ssl.SSLContext, method: str, path: str, body: Any = None,
         raw: bytes | None = None) -> tuple[int, dict[str, Any], str]:
    """One request to an agent: status code, decoded body, and the body's text."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        return resp.status, json.loads(text), text
    finally:
        conn.close()


def assert_refused_at_tls(port: int, certs: AgentCerts, client: str | None) -> None:
    """No HTTP answer. A TLS 1.2 client fails in the handshake itself; a TLS 1.3 client, whose side of
    the handshake ends before the server has judged its certificate, reads only the connection's end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            pytest.raises((ssl.SSLError, ConnectionResetError)):
        certs.ssl(client, ssl.TLSVersion.TLSv1_2).wrap_socket(sock)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            certs.ssl(client, ssl.TLSVersion.TLSv1_3).wrap_socket(sock) as conn:
        conn.sendall(f"GET {protocol.STATUS} HTTP/1.1\r\nHost: agent\r\n\r\n".encode())
        try:
            answer = conn.recv(1024)
        except (ssl.SSLError, ConnectionResetError):
            answer = b""
        assert answer == b"", answer


# -- the world ------------------------------------------------------------------------------------

@dataclass
class World:
    root: Path
    host: HostCluster
    etcd: Etcd
    key: Path
    api: ApiServer
    kubectl: Kubectl
    files: NodeFiles
    certs: AgentCerts
    agent: Proc
    port: int
    original: dict[str, tuple[str, Any, int]]

    def status(self) -> dict[str, Any]:
        code, body, _ = call(self.port, self.certs.ssl(), "GET", protocol.STATUS)
        assert code == 200, body
        return body

    def vc(self, name: str = NAME) -> dict[str, Any]:
        return self.kubectl.json("get", "vc", name, "-n", NS)

    def host_node(self) -> dict[str, Any]:
        return json.loads(self.host.kubectl("get", "node", NODE, "-o", "json").stdout)

    def start_agent(self) -> None:
        self.agent.start(env={"PYTHONPATH": str(REPO)})
        wait_until(lambda: self.status() is not None, 20, "node agent")

    def standin_pid(self) -> int:
        return int((self.root / "standin.pid").read_text())

    def assert_back_on_the_host(self, since: str) -> None:
        """The original files, byte for byte, a stand-in heartbeating the host again, nothing saved."""
        assert self.files.snapshot() == self.original
        assert self.status()["joined"] is False
        assert not (self.root / "agent-state" / "backup").exists()
        wait_until(lambda: host_heartbeat(self) > since, 15, "a heartbeat on the host after leaving", interval=0.5)


def host_heartbeat(world: World) -> str:
    node = world.host_node()
    return next(c["lastHeartbeatTime"] for c in node["status"]["conditions"] if c["type"] == "Ready")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pki_files: Pki) -> Iterator[World]:
    root = tmp_path_factory.mktemp("agent")
    host = HostCluster(root / "host", free_port(), free_port(), free_port())
    etcd = start_etcd(root, "etcd")
    api: ApiServer | None = None
    agent: Proc | None = None
    try:
        HostPki.ensure(host.root / "pki")
        write_kubeconfig(host.admin_kubeconfig, host.pki.kubeconfig(host.url, "admin"))
        host.procs["etcd"] = host.etcd().start().proc
        host.start_apiserver()
        certs = AgentCerts.create(root / "agent-pki")
        key = generate_key_file(root / "encryption.key")
        port = free_port()
        client_cert, client_key = certs.files("reconciler")
        api = ApiServer(pki_files, etcd.url, free_port(), root / "vc-apiserver.log", extra_args=[
            "--control-plane-runtime", "process", "--runtime-dir", str(root / "tenants"),
            "--runtime-bin-dir", str(BIN), "--encryption-key-file", str(key),
            "--host-kubeconfig", str(host.admin_kubeconfig), "--leader-elect-lease-duration", "3",
            "--identity", "agent-test", "--node-joiner", "agent", "--node-agent-port", str(port),
            "--node-agent-ca-file", str(certs.agent_ca), "--node-agent-client-cert-file", client_cert,
            "--node-agent-client-key-file", client_key]).start()
        kubectl = Kubectl(api.kubeconfig(root / "admin.kubeconfig"))
        kubectl.run("create", "-f", "-", input=json.dumps(vc(NAME, NS)))
        files = NodeFiles(root / "node")
        files.create(host)
        original = files.snapshot()
        restart = standin_command(root, files)
        subprocess.run(restart, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60,
                       capture_output=True)  # the node boots: its kubelet registers with the host
        agent = static_pod_agent(root, certs, files, port, restart)
        w = World(root, host, etcd, key, api, kubectl, files, certs, agent, port, original)
        w.start_agent()
        kubectl.run("wait", f"vc/{NAME}", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=150)
        wait_until(lambda: host_heartbeat(w) != "", 20, "the node on the host")
        yield w
    finally:
        if agent is not None:
            agent.stop()
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int((root / "standin.pid").read_text()), signal.SIGKILL)
        for pid in processes_under(root / "tenants"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if api is not None:
            api.stop()
        etcd.stop()
        host.stop()


@dataclass
class Clients:
    host: KubeClient
    secrets: SecretStore
    tenant: KubeClient
    tenant_pki: TenantPki
    joiner: AgentJoiner


@contextlib.asynccontextmanager
async def clients(world: World) -> AsyncIterator[Clients]:
    host = KubeClient.from_kubeconfig(world.host.admin_kubeconfig)
    etcd = EtcdClient(EtcdConfig([world.etcd.url]))
    await etcd.start()
    secrets = SecretStore(etcd, load_key_file(world.key))
    obj = world.vc()
    tenant_pki = await load_pki(secrets, obj)
    assert tenant_pki is not None
    tenant = admin_client(tenant_pki, obj["status"]["controlPlaneEndpoint"])
    access = AgentAccess.from_files(world.certs.agent_ca, *world.certs.files("reconciler"), port=world.port)
    try:
        yield Clients(host, secrets, tenant, tenant_pki, AgentJoiner(host, secrets, access))
    finally:
        await tenant.close()
        await host.close()
        await etcd.close()


async def join_until_ready(world: World, c: Clients) -> None:
    """What the reconciler does each pass: join until the tenant Node is Ready."""
    obj, host_node = world.vc(), world.host_node()
    deadline = time.monotonic() + 30
    while not await c.joiner.join(obj, c.tenant, host_node, None):
        assert time.monotonic() < deadline, "the node did not become Ready in the tenant"
        await asyncio.sleep(0.3)


async def tenant_node(c: Clients) -> dict[str, Any] | None:
    try:
        return await c.tenant.get(f"/api/v1/nodes/{NODE}")
    except HostError as e:
        assert e.code == 404, e
        return None


def join_body(c: Clients, virtual_cluster: str = OWNER, ca: pki.KeyPair | None = None) -> dict[str, str]:
    """A valid join request: a fresh node credential from the tenant CA (or from ``ca``)."""
    signer = ca or c.tenant_pki.pair("ca")
    credential = pki.new_leaf(signer, protocol.node_user(NODE), organizations=[protocol.NODES_GROUP])
    return protocol.JoinRequest(virtual_cluster, c.tenant.server, signer.cert_pem, credential.cert_pem,
                                credential.key_pem, NODE).to_json()


def kubelet_kubectl(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl with exactly the kubeconfig the kubelet reads."""
    return subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(world.files.kubeconfig), *args],
                          capture_output=True, text=True, timeout=30)


def assert_status(body: dict[str, Any], code: int, reason: str) -> None:
    assert (body["kind"], body["apiVersion"], body["status"]) == ("Status", "v1", "Failure"), body
    assert (body["code"], body["reason"]) == (code, reason), body


# -- the tests --------------------------------------------------------------------------------------

async def test_join_makes_the_node_ready_in_the_tenant_as_system_node_and_leave_restores_the_files(
        world: World) -> None:
    async with clients(world) as c:
        await join_until_ready(world, c)
        heartbeat_when_joined = host_heartbeat(world)
        node = await tenant_node(c)
        assert node is not None and node["status"]["nodeInfo"]["kubeletVersion"] == "v0.0.0-standin"
        lease = await c.tenant.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
        assert lease["spec"]["holderIdentity"] == NODE
        status = world.status()
        assert (status["joined"], status["virtualCluster"], status["server"], status["kubeletRestarted"]) == (
            True, OWNER, c.tenant.server, True)

        # The kubelet's files now name the tenant; the credential is the tenant CA's system:node:NODE.
        assert world.files.server() == c.tenant.server
        assert world.files.ca.read_bytes() == c.tenant_pki.files["ca.crt"]
        assert not world.files.credential.is_symlink()
        assert stat.S_IMODE(world.files.credential.stat().st_mode) == 0o600
        assert stat.S_IMODE(world.files.kubeconfig.stat().st_mode) == 0o600
        whoami = json.loads(kubelet_kubectl(world, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
        assert whoami["username"] == f"system:node:{NODE}" and "system:nodes" in whoami["groups"]

        # NodeRestriction holds that credential to its own Node.
        await c.tenant.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                "metadata": {"name": "bystander"}})
        try:
            out = kubelet_kubectl(world, "label", "node", "bystander", "hacked=true")
            assert out.returncode != 0 and "Forbidden" in out.stderr, out.stderr
            assert kubelet_kubectl(world, "label", "node", NODE, "kubernetes.io/os=linux", "--overwrite").returncode == 0
        finally:
            await c.tenant.delete("/api/v1/nodes/bystander")

        await c.joiner.leave(world.vc(), c.tenant, NODE)
        assert await tenant_node(c) is None
        world.assert_back_on_the_host(heartbeat_when_joined)


def test_the_reconciler_promotes_the_node_through_its_agent_and_hands_it_back_on_scale_down_and_delete(
        world: World) -> None:
    name, promote = "promoted", {"promoteResources": {"nodes": [NODE]}}

    def promoted() -> str:
        wait_until(lambda: world.vc(name)["status"].get("nodes") == [{"name": NODE, "phase": "Ready"}], 90,
                   "the node promoted", interval=0.5)
        assert world.host_node()["metadata"]["labels"].get("kosmos.io/virtualcluster") == f"{NS}.{name}"
        assert world.status()["virtualCluster"] == f"{NS}/{name}"
        assert world.files.server() == world.vc(name)["status"]["controlPlaneEndpoint"]
        return host_heartbeat(world)

    def handed_back(since: str) -> None:
        wait_until(lambda: "kosmos.io/virtualcluster" not in world.host_node()["metadata"]["labels"], 60,
                   "the node handed back", interval=0.5)
        assert not world.host_node()["spec"].get("unschedulable")
        world.assert_back_on_the_host(since)

    world.kubectl.run("create", "-f", "-", input=json.dumps(vc(name, NS, promote)))
    since = promoted()
    world.kubectl.run("patch", "vc", name, "-n", NS, "--type", "merge",
                      "-p", json.dumps({"spec": {"promoteResources": None}}))
    handed_back(since)
    assert world.vc(name)["status"]["nodes"] == []
    world.kubectl.run("patch", "vc", name, "-n", NS, "--type", "merge", "-p", json.dumps({"spec": promote}))
    since = promoted()
    world.kubectl.run("delete", "vc", name, "-n", NS, "--wait", timeout=120)
    handed_back(since)
    assert not (world.root / "tenants" / NS / name).exists()


async def test_clients_without_the_reconcilers_certificate_are_refused_and_change_nothing(world: World) -> None:
    assert_refused_at_tls(world.port, world.certs, None)
    assert_refused_at_tls(world.port, world.certs, "stranger")
    assert_refused_at_tls(world.port, world.certs, "serving")  # the key every node holds is no client credential
    async with clients(world) as c:
        body = join_body(c)
    intruder = world.certs.ssl("intruder")
    for method, path, payload in (("GET", protocol.STATUS, None), ("POST", protocol.JOIN, body),
                                  ("POST", protocol.LEAVE, {"virtualCluster": OWNER})):
        code, answer, _ = call(world.port, intruder, method, path, payload)
        assert code == 403, answer
        assert_status(answer, 403, "Forbidden")
        assert "system:kube-scheduler" in answer["message"]
    assert world.status()["joined"] is False
    assert world.files.snapshot() == world.original


async def test_unknown_paths_wrong_methods_and_malformed_bodies_get_status_errors(world: World) -> None:
    ctx = world.certs.ssl()
    for method, path, code, reason in (("GET", "/", 404, "NotFound"), ("GET", "/v1/exec", 404, "NotFound"),
                                       ("POST", "/v1/run", 404, "NotFound"),
                                       ("GET", protocol.JOIN, 405, "MethodNotAllowed"),
                                       ("DELETE", protocol.LEAVE, 405, "MethodNotAllowed"),
                                       ("POST", protocol.STATUS, 405, "MethodNotAllowed")):
        status, answer, _ = call(world.port, ctx, method, path, {})
        assert status == code, (method, path, answer)
        assert_status(answer, code, reason)

    async with clients(world) as c:
        good = join_body(c)
        wrong_ca = join_body(c, ca=pki.new_ca("not-the-tenant"))
    wrong_ca["caPEM"] = good["caPEM"]  # a credential the tenant CA never signed
    wrong_node = {**good, "nodeName": "another-node"}
    mismatched_key = {**good, "keyPEM": pki.key_pem(pki.new_key()).decode()}
    cases: list[tuple[bytes | None, Any, set[str]]] = [
        (b"{not json", None, set()), (None, ["a", "list"], set()), (None, "text", set()),
        (None, {}, {"virtualCluster", "server", "caPEM", "certPEM", "keyPEM", "nodeName"}),
        (None, {**good, "virtualCluster": "no-namespace"}, {"virtualCluster"}),
        (None, {**good, "server": "http://127.0.0.1:1"}, {"server"}),
        (None, {**good, "caPEM": 42}, {"caPEM"}),
        (None, wrong_node, {"nodeName"}), (None, wrong_ca, {"certPEM"}), (None, mismatched_key, {"keyPEM"}),
    ]
    for raw, body, fields in cases:
        status, answer, text = call(world.port, ctx, "POST", protocol.JOIN, body, raw=raw)
        assert status == 400, (body, answer)
        assert_status(answer, 400, "BadRequest")
        assert {cause["field"] for cause in answer.get("details", {}).get("causes", [])} == fields, answer
        assert "BEGIN" not in text  # key material is never echoed
    status, answer, _ = call(world.port, ctx, "POST", protocol.LEAVE, {"virtualCluster": 7})
    assert status == 400 and answer["details"]["causes"][0]["field"] == "virtualCluster"
    status, answer, _ = call(world.port, ctx, "POST", protocol.JOIN, raw=b" " * (260 << 10))
    assert status == 413
    assert_status(answer, 413, "RequestEntityTooLarge")
    log = (world.root / "agent.log").read_text()
    assert "Traceback" not in log and "PRIVATE KEY" not in log and "CERTIFICATE-----" not in log
    assert world.status()["joined"] is False
    assert world.files.snapshot() == world.original


async def test_a_joined_node_refuses_another_tenant_and_a_repeated_join_keeps_the_first_backup(
        world: World) -> None:
    ctx = world.certs.ssl()
    async with clients(world) as c:
        status, answer, _ = call(world.port, ctx, "POST", protocol.JOIN, join_body(c))
        assert status == 200 and answer["joined"] is True, answer
        await join_until_ready(world, c)
        heartbeat_when_joined = host_heartbeat(world)
        first_pid = world.standin_pid()

        status, again, _ = call(world.port, ctx, "POST", protocol.JOIN, join_body(c))  # a new credential
        assert status == 200 and again["since"] == answer["since"], again
        assert world.standin_pid() != first_pid  # the kubelet restarted onto the new credential
        joined_files = world.files.snapshot()

        other = join_body(c, "other-team/other-cluster", ca=pki.new_ca("other-tenant"))
        status, refused, _ = call(world.port, ctx, "POST", protocol.JOIN, other)
        assert status == 409, refused
        assert_status(refused, 409, "Conflict")
        assert OWNER in refused["message"] and "other-team/other-cluster" in refused["message"]
        status, refused, _ = call(world.port, ctx, "POST", protocol.LEAVE,
                                  {"virtualCluster": "other-team/other-cluster"})
        assert status == 409, refused
        assert_status(refused, 409, "Conflict")
        assert world.files.snapshot() == joined_files
        assert world.status()["virtualCluster"] == OWNER

        status, left, _ = call(world.port, ctx, "POST", protocol.LEAVE, {"virtualCluster": OWNER})
        assert status == 200 and left["joined"] is False, left
        world.assert_back_on_the_host(heartbeat_when_joined)  # the first join's copy, not the second's
        status, again, _ = call(world.port, ctx, "POST", protocol.LEAVE, {"virtualCluster": OWNER})
        assert status == 200 and again["joined"] is False
        await c.joiner.leave(world.vc(), c.tenant, NODE)  # the tenant forgets the node
        assert await tenant_node(c) is None


async def test_an_agent_restarted_while_joined_still_knows_it_and_leave_still_restores(world: World) -> None:
    async with clients(world) as c:
        await join_until_ready(world, c)
        heartbeat_when_joined = host_heartbeat(world)
        before = world.status()
        world.agent.kill()
        world.start_agent()
        after = world.status()
        assert after == before and after["joined"] is True and after["virtualCluster"] == OWNER
        assert dt.datetime.fromisoformat(after["since"]) <= dt.datetime.now(dt.UTC)
        await c.joiner.leave(world.vc(), c.tenant, NODE)
        assert await tenant_node(c) is None
        world.assert_back_on_the_host(heartbeat_when_joined)


async def test_a_failing_restart_command_is_reported_as_a_status_and_leave_still_restores(
        world: World, tmp_path: Path) -> None:
    files = NodeFiles(tmp_path / "node")
    files.create(world.host)
    original = files.snapshot()
    fail = ["sh", "-c", "echo kubelet.service not found >&2; exit 3"]
    port = free_port()
    agent = agent_proc(tmp_path, world.certs, files, port, fail).start(env={"PYTHONPATH": str(REPO)})
    ctx = world.certs.ssl()
    try:
        wait_until(lambda: call(port, ctx, "GET", protocol.STATUS)[0] == 200, 20, "the second agent")
        async with clients(world) as c:
            status, answer, _ = call(port, ctx, "POST", protocol.JOIN, join_body(c))
        assert status == 500, answer
        assert_status(answer, 500, "InternalError")
        assert "exited with 3" in answer["message"] and "kubelet.service not found" in answer["message"]
        status_after = call(port, ctx, "GET", protocol.STATUS)[1]
        assert (status_after["joined"], status_after["kubeletRestarted"]) == (True, False)  # something to undo
        status, answer, _ = call(port, ctx, "POST", protocol.LEAVE, {"virtualCluster": OWNER})
        assert status == 500 and "exited with 3" in answer["message"]
        assert files.snapshot() == original  # the files are back even though the kubelet could not restart
        assert "kubelet.service not found" in agent.tail(100)
    finally:
        agent.stop()


async def test_the_joiner_trusts_an_agent_by_the_pinned_name_not_by_the_address_it_dials(
        world: World, tmp_path: Path) -> None:
    """A server whose certificate comes from the agent CA but names something else (as any server of a CA
    reused for agents would) gets no join request: the tenant credential never leaves the joiner."""
    agent_ca = pki.KeyPair.read(world.certs.dir, tls.AGENT_CA)
    pki.new_leaf(agent_ca, "kube-apiserver", hosts=["127.0.0.1", "localhost"],
                 usages=(pki.SERVER_AUTH,)).write(world.certs.dir, "impostor")
    files = NodeFiles(tmp_path / "node")
    files.create(world.host)
    original = files.snapshot()
    port = free_port()
    impostor = agent_proc(tmp_path, world.certs, files, port, ["true"], serving="impostor")
    impostor.start(env={"PYTHONPATH": str(REPO)})
    try:
        def serving() -> bool:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            return False

        wait_until(serving, 20, "the impostor agent")
        with pytest.raises(ssl.SSLCertVerificationError, match="not valid for 'kosmos-node-agent'"):
            call(port, world.certs.ssl(), "GET", protocol.STATUS)
        async with clients(world) as c:
            access = AgentAccess.from_files(world.certs.agent_ca, *world.certs.files("reconciler"), port=port)
            joiner = AgentJoiner(c.host, c.secrets, access)
            assert await joiner.join(world.vc(), c.tenant, world.host_node(), None) is False
        assert files.snapshot() == original
        assert not (tmp_path / "agent-state" / "state.json").exists()
    finally:
        impostor.stop()
