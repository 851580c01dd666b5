"""The node agent's static pod and its installer (reconciler/nodeagent/staticpod.py), on temporary
directories standing in for the node's."""

from __future__ import annotations

import shlex
import ssl
import stat
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from apiserver.machinery import incluster
from certs import pki
from reconciler.nodeagent import CLIENT_CN, staticpod
from reconciler.nodeagent.__main__ import parse_args as agent_parse_args
from reconciler.nodeagent.files import KUBEADM, KubeletPaths
from reconciler.nodeagent.state import Joined, StateFile


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node's directories, and the installer's mounted Secret."""
    (tmp_path / "etc/kubernetes/manifests").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.mkdir()
    ca = pki.new_ca("kosmos-node-agent-ca")
    serving = pki.new_leaf(ca, "kosmos-node-agent", hosts=["kosmos-node-agent"], usages=(pki.SERVER_AUTH,))
    (secret / "tls.crt").write_bytes(serving.cert_pem)
    (secret / "tls.key").write_bytes(serving.key_pem)
    (secret / "ca.crt").write_bytes(pki.new_ca("kosmos-node-agent-client-ca").cert_pem)
    return tmp_path


def spec(root: Path, image: str = "registry.example/vc-apiserver:1.2.3") -> staticpod.AgentPod:
    return staticpod.AgentPod(image, "worker-7", tls_dir=root / "etc/kosmos-node-agent",
                              state_dir=root / "var/lib/kosmos-node-agent")


def test_the_manifest_is_a_pod_the_kubelet_can_run_without_the_api() -> None:
    pod = yaml.safe_load(staticpod.render(staticpod.AgentPod("registry.example/vc-apiserver:1.2.3", "worker-7")))
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert (pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("kosmos-node-agent", "kosmos-node-agent")
    spec_ = pod["spec"]
    assert spec_["hostNetwork"] and spec_["hostPID"], "reached at the node's address; nsenter -t 1"
    assert spec_["automountServiceAccountToken"] is False and "serviceAccountName" not in spec_
    assert spec_["priorityClassName"] == "system-node-critical"
    [container] = spec_["containers"]
    assert container["image"] == "registry.example/vc-apiserver:1.2.3"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == ["python", "-m", "reconciler.nodeagent"]
    assert container["securityContext"] == {"privileged": True}
    # Static pods cannot reference API objects: host directories only.
    volumes = {v["name"]: v for v in spec_["volumes"]}
    assert all(set(v) == {"name", "hostPath"} for v in volumes.values())
    assert not any(key in container for key in ("env", "envFrom"))
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path, m in mounts.items():
        assert volumes[m["name"]]["hostPath"]["path"] == path, "each host directory at its own path"
    assert set(mounts) == {"/etc/kosmos-node-agent", "/var/lib/kosmos-node-agent", "/etc/kubernetes",
                           "/var/lib/kubelet/pki"}, "the kubelet's file directories, not all of /var/lib/kubelet"
    assert mounts["/etc/kosmos-node-agent"].get("readOnly") is True
    assert not mounts["/etc/kubernetes"].get("readOnly") and not mounts["/var/lib/kubelet/pki"].get("readOnly")


def test_the_flags_are_the_agents_own() -> None:
    pod = staticpod.manifest(staticpod.AgentPod("img", "worker-7", port=10444))
    [container] = pod["spec"]["containers"]
    args = agent_parse_args(container["args"])  # the agent's own parser accepts exactly these
    assert args.listen == "0.0.0.0:10444" and container["ports"][0]["containerPort"] == 10444
    assert (args.tls_cert, args.tls_key, args.client_ca) == (
        "/etc/kosmos-node-agent/tls.crt", "/etc/kosmos-node-agent/tls.key", "/etc/kosmos-node-agent/ca.crt")
    assert args.allowed_client_cn == [CLIENT_CN]
    assert args.node_name == "worker-7"
    assert args.state_dir == "/var/lib/kosmos-node-agent"
    assert (args.kubelet_kubeconfig, args.kubelet_ca, args.kubelet_client_cert) == (
        "/etc/kubernetes/kubelet.conf", "/etc/kubernetes/pki/ca.crt", "/var/lib/kubelet/pki/kubelet-client-current.pem")
    assert shlex.split(args.restart_command) == ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--",
                                                 "systemctl", "restart", "kubelet"]


def test_the_agent_and_its_static_pod_default_to_kubeadms_layout_and_a_node_directory_nests_it() -> None:
    args = agent_parse_args(["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--node-name", "n"])
    assert (args.kubelet_kubeconfig, args.kubelet_ca, args.kubelet_client_cert) == tuple(map(str, KUBEADM.all()))
    assert staticpod.KUBELET == KUBEADM
    assert KUBEADM.under(Path("/lab/node-1")).all() == (
        Path("/lab/node-1/etc/kubernetes/kubelet.conf"), Path("/lab/node-1/etc/kubernetes/pki/ca.crt"),
        Path("/lab/node-1/var/lib/kubelet/pki/kubelet-client-current.pem"))


def test_other_kubelet_layouts_get_their_own_directories() -> None:
    paths = KubeletPaths(Path("/var/lib/rancher/agent/kubelet.kubeconfig"), Path("/var/lib/rancher/agent/client-ca.crt"),
                         Path("/var/lib/rancher/agent/pki/client-kubelet.pem"))
    assert staticpod.kubelet_dirs(paths) == [Path("/var/lib/rancher/agent")]
    pod = staticpod.manifest(staticpod.AgentPod("img", "n", kubelet=paths))
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert "/var/lib/rancher/agent" in mounts and "/etc/kubernetes" not in mounts


def test_install_copies_the_tls_files_root_only_and_writes_the_manifest(node: Path) -> None:
    manifests = node / "etc/kubernetes/manifests"
    s = spec(node)
    written = staticpod.install(s, node / "secret", manifests)
    tls_dir = node / "etc/kosmos-node-agent"
    manifest = manifests / "kosmos-node-agent.yaml"
    assert set(written) == {tls_dir / "tls.crt", tls_dir / "tls.key", tls_dir / "ca.crt", manifest}
    assert mode(tls_dir) == 0o700
    assert mode(tls_dir / "tls.key") == 0o600
    assert mode(manifest) == 0o600
    for name in ("tls.crt", "tls.key", "ca.crt"):
        assert (tls_dir / name).read_bytes() == (node / "secret" / name).read_bytes()
    pod = yaml.safe_load(manifest.read_text())
    assert pod["spec"]["containers"][0]["image"] == "registry.example/vc-apiserver:1.2.3"
    assert len(pod["metadata"]["annotations"][staticpod.TLS_HASH]) == 64
    assert [p.name for p in manifests.iterdir()] == ["kosmos-node-agent.yaml"], "no temporary file left"


def test_install_again_writes_nothing(node: Path) -> None:
    """The kubelet restarts a static pod whose manifest changes: an unchanged one is not even rewritten."""
    manifests = node / "etc/kubernetes/manifests"
    staticpod.install(spec(node), node / "secret", manifests)
    files = [manifests / "kosmos-node-agent.yaml", *(node / "etc/kosmos-node-agent").iterdir()]
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}
    assert staticpod.install(spec(node), node / "secret", manifests) == []
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files} == before


def test_a_new_certificate_or_image_changes_the_manifest(node: Path) -> None:
    manifests = node / "etc/kubernetes/manifests"
    manifest = manifests / "kosmos-node-agent.yaml"
    staticpod.install(spec(node), node / "secret", manifests)
    first = yaml.safe_load(manifest.read_text())

    renewed = pki.new_leaf(pki.new_ca("kosmos-node-agent-ca"), "kosmos-node-agent", hosts=["kosmos-node-agent"])
    (node / "secret" / "tls.crt").write_bytes(renewed.cert_pem)
    (node / "secret" / "tls.key").write_bytes(renewed.key_pem)
    written = staticpod.install(spec(node), node / "secret", manifests)
    assert set(written) == {node / "etc/kosmos-node-agent/tls.crt", node / "etc/kosmos-node-agent/tls.key", manifest}
    second = yaml.safe_load(manifest.read_text())
    assert second["metadata"]["annotations"] != first["metadata"]["annotations"], "the kubelet restarts the agent"

    assert staticpod.install(spec(node, "registry.example/vc-apiserver:1.2.4"), node / "secret", manifests) == [manifest]
    (node / "etc/kosmos-node-agent/tls.key").chmod(0o644)
    assert staticpod.install(spec(node, "registry.example/vc-apiserver:1.2.4"), node / "secret", manifests) == [
        node / "etc/kosmos-node-agent/tls.key"]
    assert mode(node / "etc/kosmos-node-agent/tls.key") == 0o600


def test_install_needs_the_kubelets_static_pod_directory_and_the_whole_secret(node: Path) -> None:
    with pytest.raises(RuntimeError, match="staticPodPath"):
        staticpod.install(spec(node), node / "secret", node / "no-such-dir")
    (node / "secret" / "ca.crt").unlink()
    with pytest.raises(RuntimeError, match="lacks ca.crt"):
        staticpod.install(spec(node), node / "secret", node / "etc/kubernetes/manifests")


def joined(state_dir: Path) -> None:
    StateFile(state_dir / "state.json").save(Joined("team-a/edge", "https://10.0.0.1:6443", "worker-7",
                                                    "2025-01-01T00:00:00Z", restarted=True))


def test_uninstall_refuses_while_the_node_is_joined_and_removes_the_agent_after_it_left(node: Path) -> None:
    manifests, tls_dir, state = node / "etc/kubernetes/manifests", node / "etc/kosmos-node-agent", node / "var/lib/kosmos-node-agent"
    staticpod.install(spec(node), node / "secret", manifests)
    joined(state)
    reason = staticpod.uninstall(manifests, tls_dir, state, settle=0)
    assert reason is not None and "team-a/edge" in reason and "leave" in reason
    assert (manifests / "kosmos-node-agent.yaml").exists() and (tls_dir / "tls.key").exists()

    StateFile(state / "state.json").clear()
    assert staticpod.uninstall(manifests, tls_dir, state, settle=0) is None
    assert list(manifests.iterdir()) == [] and list(tls_dir.iterdir()) == []
    assert staticpod.uninstall(manifests, tls_dir, state, settle=0) is None, "idempotent"


def test_uninstall_puts_the_agent_back_when_a_join_completed_while_it_stopped(
        node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifests, tls_dir, state = node / "etc/kubernetes/manifests", node / "etc/kosmos-node-agent", node / "var/lib/kosmos-node-agent"
    staticpod.install(spec(node), node / "secret", manifests)
    before = (manifests / "kosmos-node-agent.yaml").read_bytes()
    monkeypatch.setattr(staticpod.time, "sleep", lambda _: joined(state))  # the agent finishes a join as it stops
    reason = staticpod.uninstall(manifests, tls_dir, state, settle=60)
    assert reason is not None and "agent is back" in reason
    assert (manifests / "kosmos-node-agent.yaml").read_bytes() == before
    assert (tls_dir / "tls.key").exists()


def test_the_command_runs_one_pass_and_marks_itself_ready(node: Path) -> None:
    ready = node / "run/ready"
    common = ["--tls-dir", str(node / "etc/kosmos-node-agent"), "--state-dir", str(node / "var/lib/kosmos-node-agent"),
              "--manifest-dir", str(node / "etc/kubernetes/manifests"), "--ready-file", str(ready), "--once"]
    assert staticpod.main(["install", "--image", "img:1", "--node-name", "worker-7", "--secret-dir",
                           str(node / "secret"), *common]) == 0
    assert ready.exists()
    pod = yaml.safe_load((node / "etc/kubernetes/manifests/kosmos-node-agent.yaml").read_text())
    assert "--node-name=worker-7" in pod["spec"]["containers"][0]["args"]

    joined(node / "var/lib/kosmos-node-agent")
    assert staticpod.main(["uninstall", "--settle", "0", *common]) == 1
    assert not ready.exists(), "a joined node's remover is not ready"


async def test_the_installer_reads_its_own_pods_image_as_its_service_account(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one request the installer makes of its cluster, where a pod finds it; a refusal reads as Status."""
    ca = pki.new_ca("cluster-ca")
    serving = pki.new_leaf(ca, "kubernetes", hosts=["127.0.0.1"], usages=(pki.SERVER_AUTH,))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "token").write_text("sa-token\n")
    monkeypatch.setattr(incluster, "CA_FILE", tmp_path / "ca.crt")
    monkeypatch.setattr(incluster, "TOKEN_FILE", tmp_path / "token")
    asked: list[tuple[str, str]] = []

    async def pod(request: web.Request) -> web.Response:
        asked.append((request.path, request.headers["Authorization"]))
        if request.match_info["name"] != "installer-0":
            return web.json_response({"kind": "Status", "reason": "NotFound",
                                      "message": f'pods "{request.match_info["name"]}" not found'}, status=404)
        return web.json_response({"spec": {"containers": [{"name": "installer", "image": "registry.example/vc:1"}]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", pod)
    runner = web.AppRunner(app)
    await runner.setup()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*serving.write(tmp_path, "serving"))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    try:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(runner.addresses[0][1]))
        assert await staticpod.pod_image(staticpod.InClusterApi(), "kosmos", "installer-0") == "registry.example/vc:1"
        with pytest.raises(LookupError, match='^404 NotFound: pods "gone" not found$'):
            await staticpod.pod_image(staticpod.InClusterApi(), "kosmos", "gone")
    finally:
        await runner.cleanup()
    assert asked == [("/api/v1/namespaces/kosmos/pods/installer-0", "Bearer sa-token"),
                     ("/api/v1/namespaces/kosmos/pods/gone", "Bearer sa-token")]
