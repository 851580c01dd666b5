"""Tenant control planes with the process runtime: real etcd, kube-apiserver, controller-manager, scheduler."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from apiserver.etcd.client import EtcdClient, EtcdConfig, prefix_end
from apiserver.storage.keys import secret_key
from apiserver.storage.secrets import generate_key_file
from hack.harness import BIN, ApiServer, Etcd, Pki, free_port, wait_until
from tests.conftest import EXAMPLES, Kubectl, start_etcd, tenant_processes, vc

pytestmark = pytest.mark.e2e


@dataclass
class ControlPlanes:
    api: ApiServer
    etcd: Etcd
    runtime_dir: Path
    kubectl: Kubectl
    root: Path

    def tenant_dir(self, namespace: str, name: str) -> Path:
        return self.runtime_dir / namespace / name

    def kubeconfig(self, namespace: str, name: str, *params: str) -> dict:
        path = f"/apis/kosmos.io/v1alpha1/namespaces/{namespace}/virtualclusters/{name}/kubeconfig"
        if params:
            path += "?" + "&".join(params)
        return json.loads(self.kubectl.run("get", "--raw", path).stdout)

    def tenant(self, namespace: str, name: str, *params: str) -> Kubectl:
        path = self.root / f"{namespace}-{name}-{time.monotonic_ns()}.kubeconfig"
        path.write_text(json.dumps(self.kubeconfig(namespace, name, *params)))
        return Kubectl(path)

    def wait_ready(self, namespace: str, name: str, timeout: str = "120s") -> None:
        self.kubectl.run("wait", f"vc/{name}", "-n", namespace, "--for=condition=Ready", f"--timeout={timeout}",
                         timeout=180)


def running_components(base: Path) -> list[int]:
    """Pids of live processes whose command line points into a tenant's directory."""
    return list(tenant_processes(base))


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory, pki_files: Pki) -> Iterator[ControlPlanes]:
    root = tmp_path_factory.mktemp("cp")
    etcd = start_etcd(root, "etcd")
    key = generate_key_file(root / "encryption.key")
    runtime_dir = root / "tenants"
    api = ApiServer(pki_files, etcd.url, free_port(), root / "vc-apiserver.log", extra_args=[
        "--control-plane-runtime", "process", "--runtime-dir", str(runtime_dir), "--runtime-bin-dir", str(BIN),
        "--encryption-key-file", str(key), "--leader-elect-lease-duration", "3", "--identity", "cp-test"]).start()
    planes = ControlPlanes(api, etcd, runtime_dir, Kubectl(api.kubeconfig(root / "admin.kubeconfig")), root)
    yield planes
    for ns in runtime_dir.glob("*"):
        for tenant in ns.glob("*"):
            for pid in running_components(tenant):
                os.kill(pid, signal.SIGKILL)
    api.stop()
    etcd.stop()


def test_minimal_example_becomes_a_control_plane_whose_kubeconfig_works(cp: ControlPlanes) -> None:
    cp.kubectl.run("apply", "-f", str(EXAMPLES / "minimal.yaml"))
    cp.wait_ready("default", "dev")
    row = cp.kubectl.run("get", "vc", "dev", "-n", "default", "-o", "wide").stdout.splitlines()[1].split()
    assert row[:4] == ["dev", "Completed", "True", "0/0"] and row[-1].startswith("https://127.0.0.1:")
    tenant = cp.tenant("default", "dev")
    namespaces = tenant.run("get", "ns", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(namespaces)
    # each component runs with the lean tuning (less memory and idle CPU per tenant); no scheduler
    # while the tenant has nothing to schedule (the spec asks for no compute)
    processes = tenant_processes(cp.tenant_dir("default", "dev"))
    assert sorted(processes.values()) == ["etcd", "kube-apiserver", "kube-controller-manager"]
    go_env = {}
    for pid, binary in processes.items():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        go_env[binary] = sorted(e.decode() for e in environ if e.startswith((b"GOGC=", b"GOMAXPROCS=")))
    assert go_env == {"etcd": ["GOGC=50", "GOMAXPROCS=1"], "kube-apiserver": ["GOGC=50", "GOMAXPROCS=2"],
                      "kube-controller-manager": ["GOGC=50", "GOMAXPROCS=1"]}
    apiserver = next(pid for pid, binary in processes.items() if binary == "kube-apiserver")
    argv = Path(f"/proc/{apiserver}/cmdline").read_bytes().decode().split("\0")
    assert "--watch-cache=false" in argv and "--etcd-count-metric-poll-period=0" in argv
    # without its watch cache the tenant apiserver still serves watches from a resourceVersion
    rv = tenant.json("get", "namespace", "default")["metadata"]["resourceVersion"]
    tenant.run("label", "namespace", "default", "watched=yes")
    events = tenant.run("get", "--raw", f"/api/v1/namespaces?watch=1&resourceVersion={rv}&timeoutSeconds=1"
                        "&fieldSelector=metadata.name%3Ddefault", timeout=30).stdout
    assert '"watched":"yes"' in events, events


def test_tenant_controller_manager_and_services_work_and_the_caller_is_a_tenant_admin(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("svc", "apps")))
    cp.wait_ready("apps", "svc")
    tenant = cp.tenant("apps", "svc")
    tenant.run("create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=2")
    tenant.run("expose", "deployment", "web", "--port=80")
    service = tenant.json("get", "service", "web")
    assert service["spec"]["clusterIP"].startswith("10.96.")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = tenant.json("get", "pods", "-l", "app=web")["items"]
        if len(pods) == 2:
            break
        time.sleep(1)
    assert len(pods) == 2, "the tenant controller-manager did not create the Deployment's pods"
    assert len(tenant.json("get", "replicasets", "-l", "app=web")["items"]) == 1
    whoami = tenant.json("auth", "whoami")["status"]["userInfo"]
    assert whoami["username"] == "admin"  # the host user who fetched the kubeconfig
    assert "kosmos:tenant-admins" in whoami["groups"]


def test_kubeconfig_expiry_follows_expiration_seconds_within_limits(cp: ControlPlanes) -> None:
    cp.kubectl.run("apply", "-f", str(EXAMPLES / "minimal.yaml"))
    cp.wait_ready("default", "dev")
    for asked, expected in (("7200", 7200), ("10", 600), (None, 3600)):
        config = cp.kubeconfig("default", "dev", *([f"expirationSeconds={asked}"] if asked else []))
        cert = x509.load_pem_x509_certificate(base64.b64decode(config["users"][0]["user"]["client-certificate-data"]))
        remaining = (cert.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds()
        assert abs(remaining - expected) < 60, (asked, remaining)
        subject = [a.value for a in cert.subject]
        assert subject[0] == "kosmos:tenant-admins" and subject[-1] == "admin"
        assert len(subject) == 3 and subject[1].startswith("kosmos:credential:dev-")
    raw = cp.kubectl.run("get", "--raw", "/apis/kosmos.io/v1alpha1/namespaces/default/virtualclusters/dev/kubeconfig",
                         "-v=0").stdout
    assert json.loads(raw)["kind"] == "Config"


def test_kubeconfig_as_yaml_on_request(cp: ControlPlanes, pki_files: Pki) -> None:
    cp.kubectl.run("apply", "-f", str(EXAMPLES / "minimal.yaml"))
    cp.wait_ready("default", "dev")
    req = urllib.request.Request(cp.api.url + "/apis/kosmos.io/v1alpha1/namespaces/default/virtualclusters/dev/"
                                 "kubeconfig", headers={"Accept": "application/yaml"})
    with urllib.request.urlopen(req, context=pki_files.ssl_context("admin")) as resp:
        assert resp.headers["Content-Type"].startswith("application/yaml")
        assert yaml.safe_load(resp.read())["kind"] == "Config"


def test_tenants_are_isolated_from_each_other(cp: ControlPlanes) -> None:
    for name in ("iso-a", "iso-b"):
        cp.kubectl.run("create", "-f", "-", input=json.dumps(vc(name, "iso")))
    for name in ("iso-a", "iso-b"):
        cp.wait_ready("iso", name)
    a, b = cp.kubeconfig("iso", "iso-a"), cp.kubeconfig("iso", "iso-b")
    tenant_a = cp.tenant("iso", "iso-a")
    tenant_a.run("create", "namespace", "only-in-a")
    tenant_b = cp.tenant("iso", "iso-b")
    assert "only-in-a" not in tenant_b.run("get", "ns", "-o", "name").stdout
    # A's credential presented to B (trusting B's CA so that only the credential is judged).
    crossed = dict(a)
    crossed["clusters"] = [{"name": a["clusters"][0]["name"], "cluster": b["clusters"][0]["cluster"]}]
    path = cp.root / "crossed.kubeconfig"
    path.write_text(json.dumps(crossed))
    out = Kubectl(path).run("get", "ns", check=False)
    assert out.returncode != 0 and "must be logged in to the server" in out.stderr  # 401 from the new CA


def test_an_external_ip_this_machine_does_not_own_is_in_the_certificate_and_served_on_loopback(
        cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("far", "bad", {"externalIP": "192.0.2.10"})))
    cp.wait_ready("bad", "far")
    obj = cp.kubectl.json("get", "vc", "far", "-n", "bad")
    assert obj["status"]["controlPlaneEndpoint"].startswith("https://127.0.0.1:")
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "ControlPlaneReady")
    assert "externalIP 192.0.2.10 is not an address of this machine" in cond["message"]
    cert = x509.load_pem_x509_certificate((cp.tenant_dir("bad", "far") / "pki" / "apiserver.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "192.0.2.10" in {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    assert cp.tenant("bad", "far").run("get", "ns", "default", "-o", "name").stdout.strip() == "namespace/default"
    cp.kubectl.run("delete", "vc", "far", "-n", "bad", "--wait", timeout=60)


async def _secret_keys(etcd: Etcd, namespace: str) -> list[bytes]:
    client = EtcdClient(EtcdConfig([etcd.url]))
    await client.start()
    try:
        prefix = secret_key("pki", namespace, "")
        return [kv.key for kv in (await client.range(prefix, prefix_end(prefix))).kvs]
    finally:
        await client.close()


def test_private_keys_are_stored_encrypted(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("enc", "enc")))
    cp.wait_ready("enc", "enc")
    async def raw() -> bytes:
        client = EtcdClient(EtcdConfig([cp.etcd.url]))
        await client.start()
        try:
            kv = await client.get(secret_key("pki", "enc", "enc"))
            assert kv is not None
            return kv.value
        finally:
            await client.close()
    value = asyncio.run(raw())
    assert value.startswith(b"vcenc:aesgcm:v1:")
    assert b"PRIVATE KEY" not in value and b"BEGIN" not in value


def test_delete_leaves_no_process_port_directory_or_key(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("gone", "del")))
    cp.wait_ready("del", "gone")
    base = cp.tenant_dir("del", "gone")
    ports = json.loads((base / "state.json").read_text())["ports"]
    assert len(running_components(base)) == 3  # etcd, kube-apiserver, kube-controller-manager: nothing to schedule
    cp.kubectl.run("delete", "vc", "gone", "-n", "del", "--wait", timeout=60)
    assert running_components(base) == []
    assert not base.exists()
    for port in ports.values():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as every server binds
            s.bind(("127.0.0.1", port))  # nothing listens on it any more
    assert asyncio.run(_secret_keys(cp.etcd, "del")) == []


def _ready_without_a_scheduler(cp: ControlPlanes, name: str) -> tuple[Path, Kubectl]:
    """A tenant that asks for no compute, Ready: its directory and its admin's kubectl."""
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc(name, name)))
    cp.wait_ready(name, name)
    base = cp.tenant_dir(name, name)
    assert not _scheduler_runs(base), "nothing to schedule yet"
    return base, cp.tenant(name, name)


def _scheduler_runs(base: Path) -> bool:
    return "kube-scheduler" in tenant_processes(base).values()


def test_a_pod_in_a_tenant_without_nodes_starts_its_scheduler_which_says_why_it_waits(cp: ControlPlanes) -> None:
    base, tenant = _ready_without_a_scheduler(cp, "lone")
    tenant.run("wait", "--for=create", "serviceaccount/default", "--timeout=60s", timeout=90)  # pods need it
    tenant.run("run", "waiting", "--image=registry.k8s.io/pause:3.10", "--restart=Never")
    tenant.run("wait", "pod/waiting", "--for=condition=PodScheduled=False", "--timeout=60s", timeout=90)
    condition = next(c for c in tenant.json("get", "pod", "waiting")["status"]["conditions"]
                     if c["type"] == "PodScheduled")
    assert condition["reason"] == "Unschedulable" and "no nodes available" in condition["message"], condition
    assert _scheduler_runs(base)
    events = tenant.json("get", "events", "--field-selector", "involvedObject.name=waiting,reason=FailedScheduling")
    assert events["items"], "the scheduler's FailedScheduling event is recorded"
    # it stays once started, though nothing is left to schedule
    tenant.run("delete", "pod", "waiting", "--wait=true")
    cp.kubectl.run("annotate", "vc", "lone", "-n", "lone", "touched=yes")  # a pass over the tenant
    time.sleep(6)
    assert _scheduler_runs(base)


def test_a_node_joined_by_hand_starts_the_scheduler_of_a_tenant_that_asked_for_no_compute(cp: ControlPlanes) -> None:
    base, tenant = _ready_without_a_scheduler(cp, "byhand")
    tenant.run("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node",
                                                      "metadata": {"name": "joined-by-hand"}}))
    deadline = time.monotonic() + 30  # the next pass over a ready tenant is at most 5 s away
    while not _scheduler_runs(base):
        assert time.monotonic() < deadline, "no scheduler 30 s after a node joined"
        time.sleep(0.5)


def test_a_crashed_tenant_apiserver_is_restarted_and_reported(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("crash", "crash")))
    cp.wait_ready("crash", "crash")
    base = cp.tenant_dir("crash", "crash")
    old = int((base / "kube-apiserver.pid").read_text())
    os.kill(old, signal.SIGKILL)
    cp.kubectl.run("wait", "vc/crash", "-n", "crash", "--for=condition=Ready=False", "--timeout=30s")
    cp.wait_ready("crash", "crash", timeout="90s")
    assert int((base / "kube-apiserver.pid").read_text()) != old
    components = {"etcd", "kube-apiserver", "kube-controller-manager"}  # no compute asked: no scheduler yet
    alive = {c for c in components if int((base / f"{c}.pid").read_text()) in running_components(base)}
    assert alive == components, (alive, [(base / "logs" / f"{c}.log").read_text()[-500:] for c in components - alive])


def _connections_to(pid: int, port: int) -> set[int]:
    """Local ports of the established TCP connections process ``pid`` holds to ``port``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    local = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                local.add(int(fields[1].rsplit(":", 1)[1], 16))
    return local


def test_the_health_checks_of_a_ready_tenant_reuse_one_connection_to_its_apiserver(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("kept", "kept")))
    cp.wait_ready("kept", "kept")
    port = int(cp.kubectl.json("get", "vc/kept", "-n", "kept")["status"]["controlPlaneEndpoint"].rsplit(":", 1)[1])
    assert cp.api.proc is not None
    seen = []
    for _ in range(13):  # a check every 5 s: two or three of them
        seen.append(_connections_to(cp.api.proc.pid, port))
        time.sleep(1.0)
    assert len({frozenset(s) for s in seen}) == 1 and len(seen[0]) == 1, seen


@contextlib.contextmanager
def _ready_conditions_seen(cp: ControlPlanes, namespace: str, name: str) -> Iterator[list[dict]]:
    """Every Ready condition the object passes through inside the block (a watch sees every version)."""
    watch = subprocess.Popen([BIN / "kubectl", "--kubeconfig", str(cp.kubectl.kubeconfig), "get", f"vc/{name}",
                              "-n", namespace, "--watch", "-o", "json"], stdout=subprocess.PIPE, text=True)
    seen: list[dict] = []
    try:
        time.sleep(1.0)  # the watch is established
        yield seen
        time.sleep(1.0)  # the last change is delivered
    finally:
        watch.terminate()
        out, _ = watch.communicate(timeout=10)
    seen += [c for obj in _json_stream(out) for c in obj["status"]["conditions"] if c["type"] == "Ready"]


def _json_stream(text: str) -> Iterator[dict]:
    decoder, index = json.JSONDecoder(), 0
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        obj, index = decoder.raw_decode(text, index)
        yield obj


def test_a_tenant_apiserver_that_stops_answering_is_reported_after_repeated_misses_not_after_one(
        cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("paused", "pause")))
    cp.wait_ready("pause", "paused")
    pid = int((cp.tenant_dir("pause", "paused") / "kube-apiserver.pid").read_text())
    # A 7 s stall. A check misses when the apiserver is stopped for its whole 2 s wait; checks come
    # every 5 s, and 3 s after a miss. So at least one check misses, and never three in a row.
    with _ready_conditions_seen(cp, "pause", "paused") as seen:
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(7.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(4.0)
    assert seen and all(c["status"] == "True" for c in seen), seen

    os.kill(pid, signal.SIGSTOP)  # a long one: reported, with why
    try:
        cp.kubectl.run("wait", "vc/paused", "-n", "pause", "--for=condition=Ready=False", "--timeout=60s",
                       timeout=90)
        ready = next(c for c in cp.kubectl.json("get", "vc/paused", "-n", "pause")["status"]["conditions"]
                     if c["type"] == "Ready")
        assert ready["reason"] == "ApiserverUnreachable", ready
        assert "stopped answering its readiness checks" in ready["message"], ready
    finally:
        os.kill(pid, signal.SIGCONT)
    cp.wait_ready("pause", "paused", timeout="60s")
    assert int((cp.tenant_dir("pause", "paused") / "kube-apiserver.pid").read_text()) == pid  # never restarted


def test_killed_vc_apiserver_converges_while_preparing_and_while_deleting(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("keep", "restart")))
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("drop", "restart")))
    cp.wait_ready("restart", "drop")
    cp.kubectl.run("delete", "vc", "drop", "-n", "restart", "--wait=false")
    time.sleep(0.3)
    cp.api.proc.kill()  # SIGKILL: one is Preparing, the other Deleting
    cp.api.start()
    cp.wait_ready("restart", "keep")
    cp.kubectl.run("wait", "vc/drop", "-n", "restart", "--for=delete", "--timeout=60s")
    assert sorted(tenant_processes(cp.tenant_dir("restart", "keep")).values()) == [
        "etcd", "kube-apiserver", "kube-controller-manager"]  # adopted, not duplicated
    assert not cp.tenant_dir("restart", "drop").exists()
    assert running_components(cp.tenant_dir("restart", "drop")) == []


def test_a_recreated_cluster_does_not_accept_the_old_credential(cp: ControlPlanes) -> None:
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("again", "again")))
    cp.wait_ready("again", "again")
    old = cp.tenant("again", "again")
    assert old.run("get", "ns", "-o", "name").returncode == 0
    cp.kubectl.run("delete", "vc", "again", "-n", "again", "--wait", timeout=60)
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("again", "again")))
    cp.wait_ready("again", "again")
    fresh = cp.kubeconfig("again", "again")
    stale = json.loads(old.kubeconfig.read_text())
    assert fresh["clusters"][0]["cluster"]["certificate-authority-data"] != \
        stale["clusters"][0]["cluster"]["certificate-authority-data"]  # a fresh CA
    stale["clusters"] = [{"name": stale["clusters"][0]["name"], "cluster": fresh["clusters"][0]["cluster"]}]
    path = cp.root / "stale.kubeconfig"
    path.write_text(json.dumps(stale))
    out = Kubectl(path).run("get", "ns", check=False)
    assert out.returncode != 0 and "must be logged in to the server" in out.stderr  # 401 from the new CA


def test_a_server_started_with_other_tenant_flags_restarts_what_they_change_and_adopts_the_rest(
        cp: ControlPlanes) -> None:
    """An upgraded or reconfigured vc-apiserver finds tenant processes an earlier one started: those whose
    command line it would write differently are restarted with its own (here the stock tuning: the
    apiserver's watch cache back on); the others are adopted as they run."""
    cp.kubectl.run("create", "-f", "-", input=json.dumps(vc("flags", "upgrade")))
    cp.wait_ready("upgrade", "flags")
    base = cp.tenant_dir("upgrade", "flags")
    before = {binary: pid for pid, binary in tenant_processes(base).items()}
    lean = list(cp.api.extra_args)
    cp.api.stop()
    cp.api.extra_args = [*lean, "--tenant-tuning", "stock"]
    try:
        cp.api.start()
        def apiserver_pid() -> int | None:
            return next((p for p, b in tenant_processes(base).items() if b == "kube-apiserver"), None)

        wait_until(lambda: apiserver_pid() not in (None, before["kube-apiserver"]), 60,
                   "the tenant apiserver restarted with the new flags")
        cp.wait_ready("upgrade", "flags")
        apiserver = apiserver_pid()
        argv = Path(f"/proc/{apiserver}/cmdline").read_bytes().decode().split("\0")
        assert "--watch-cache=false" not in argv
        after = {binary: pid for pid, binary in tenant_processes(base).items()}
        assert after["etcd"] == before["etcd"]  # its command line is the same under either tuning
    finally:
        cp.api.stop()
        cp.api.extra_args = lean
        cp.api.start()
    cp.wait_ready("upgrade", "flags")
