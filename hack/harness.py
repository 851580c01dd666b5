"""The one harness for real processes: used by ``make up`` and by the test fixtures.

It knows how to make the playground PKI, and how to start, health-check and stop
etcd and vc-apiserver as supervised subprocesses on loopback. Binaries come from
``.local/bin`` (built by ``hack/build-bins.sh``); a missing one is an error, never a
reason to skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from certs import pki

REPO = Path(__file__).resolve().parent.parent
LOCAL = REPO / ".local"
BIN = LOCAL / "bin"


def binary(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make bins` (hack/build-bins.sh) first")
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check, timeout: float, what: str, interval: float = 0.1) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``check()`` is true; TimeoutError after ``timeout``."""
    started = time.monotonic()
    deadline = started + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return time.monotonic() - started
        except Exception as e:  # the check's failure is the reason we keep waiting
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s" + (f": {last}" if last else ""))


def _zombie(pid: int) -> bool:
    """A process that has exited but was not waited for (reaped here when it is our child)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state != "Z":
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return True


@dataclass
class Proc:
    """A supervised subprocess with its log and pid file."""

    name: str
    args: list[str]
    log: Path
    pidfile: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str] | None = None) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, env={**os.environ, **(env or {})})
        if self.pidfile is not None:
            self.pidfile.parent.mkdir(parents=True, exist_ok=True)
            self.pidfile.write_text(str(self.popen.pid))
        return self

    @property
    def pid(self) -> int | None:
        if self.popen is not None:
            return self.popen.pid
        if self.pidfile is not None and self.pidfile.exists():
            return int(self.pidfile.read_text().strip() or 0) or None
        return None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        pid = self.pid
        if not pid:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return not _zombie(pid)

    def signal(self, sig: int) -> None:
        pid = self.pid
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.pid
        if pid and self.alive():
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.alive():
                self.signal(signal.SIGKILL)
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        if self.pidfile is not None:
            self.pidfile.unlink(missing_ok=True)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


# -- PKI ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pki:
    """The playground's CA, serving certificate and client certificates, as files."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def cert(self, stem: str) -> tuple[Path, Path]:
        return self.dir / f"{stem}.crt", self.dir / f"{stem}.key"

    @classmethod
    def ensure(cls, directory: Path) -> Pki:
        """Create once: CA, ``serving`` (localhost), ``admin`` (system:masters), ``user`` (no groups)."""
        out = cls(directory)
        if (directory / "admin.key").exists():
            return out
        ca = pki.new_ca("vc-apiserver-playground-ca")
        ca.write(directory, "ca")
        pki.new_leaf(ca, "vc-apiserver", hosts=["localhost", "127.0.0.1", "::1"],
                     usages=(pki.SERVER_AUTH,), days=3650).write(directory, "serving")
        pki.new_leaf(ca, "admin", organizations=["system:masters"], days=3650).write(directory, "admin")
        pki.new_leaf(ca, "alice", organizations=["team-a"], days=3650).write(directory, "user")
        return out

    def kubeconfig(self, server: str, user: str = "admin") -> dict:  # type: ignore[type-arg]
        crt, key = self.cert(user)
        return pki.kubeconfig(server, self.ca.read_bytes(), user, crt.read_bytes(), key.read_bytes(),
                              cluster="vc-apiserver")

    def ssl_context(self, user: str | None = "admin") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if user:
            crt, key = self.cert(user)
            ctx.load_cert_chain(str(crt), str(key))
        return ctx


def write_kubeconfig(path: Path, config: dict) -> Path:  # type: ignore[type-arg]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path


# -- etcd ---------------------------------------------------------------------------------

@dataclass
class Etcd:
    data_dir: Path
    client_port: int
    peer_port: int
    log: Path
    pidfile: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def command(self) -> list[str]:
        return [binary("etcd"), "--name", "default", "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{self.peer_port}",
                "--listen-metrics-urls", "", "--log-level", "warn", "--quota-backend-bytes", str(2 * 1024 ** 3),
                "--unsafe-no-fsync=false", *self.extra_args]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                return json.loads(resp.read()).get("health") == "true"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self, timeout: float = 30.0) -> Etcd:
        self.proc = Proc("etcd", self.command(), self.log, self.pidfile).start()
        try:
            wait_until(self.healthy, timeout, "etcd")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.proc.tail()}") from None
        return self

    def stop(self) -> None:
        (self.proc or Proc("etcd", [], self.log, self.pidfile)).stop()


# -- vc-apiserver -----------------------------------------------------------------------------

@dataclass
class ApiServer:
    pki: Pki
    etcd_url: str
    port: int
    log: Path
    pidfile: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    host_kubeconfig: Path | None = None  # set: delegate authn/authz to that host (its client CA is trusted)
    serving: tuple[Path, Path] | None = None  # serving cert and key (default: the Pki's)
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        crt, key = self.serving or self.pki.cert("serving")
        args = [sys.executable, "-m", "apiserver", "--bind-address", "127.0.0.1", "--secure-port", str(self.port),
                "--tls-cert-file", str(crt), "--tls-private-key-file", str(key), "--etcd-servers", self.etcd_url]
        if self.host_kubeconfig is not None:
            args += ["--authentication-kubeconfig", str(self.host_kubeconfig),
                     "--authorization-kubeconfig", str(self.host_kubeconfig)]
        else:
            args += ["--client-ca-file", str(self.pki.ca)]
        return args + self.extra_args

    def ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.serving_ca))
        ctx.check_hostname = False  # the serving certificate may name only the in-cluster Service
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=2, context=ctx) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = 30.0, wait: bool = True) -> ApiServer:
        self.proc = Proc("vc-apiserver", self.command(), self.log, self.pidfile).start(
            env={"PYTHONPATH": str(REPO)})
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Also for a server an earlier ``make up`` started (known by its pidfile and log only)."""
        try:
            wait_until(self.ready, timeout, "vc-apiserver")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self._known().tail()}") from None

    def _known(self) -> Proc:
        return self.proc or Proc("vc-apiserver", [], self.log, self.pidfile)

    @property
    def serving_ca(self) -> Path:
        """The CA that issued the serving certificate (beside it as ca.crt, or the Pki's)."""
        if self.serving is not None:
            return self.serving[0].parent / "ca.crt"
        return self.pki.ca

    def stop(self) -> None:
        self._known().stop()

    def kubeconfig(self, path: Path, user: str = "admin") -> Path:
        return write_kubeconfig(path, self.pki.kubeconfig(self.url, user))


# -- the host cluster -------------------------------------------------------------------------

SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
FRONT_PROXY_CLIENT = "front-proxy-client"
VC_SERVICE_ACCOUNT = "system:serviceaccount:kosmos-system:vc-apiserver"
LAB_GATEWAY = "10.99.0.1"  # the machine's address on the real nodes' bridge (hack/realnodes.py)
APISERVER_HOSTS = ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local", KUBERNETES_SERVICE_IP, LAB_GATEWAY]


@dataclass(frozen=True)
class HostPki:
    """A host cluster's PKI as kubeadm lays it out: cluster CA, front-proxy CA, SA keys."""

    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    @classmethod
    def ensure(cls, directory: Path) -> HostPki:
        """Create what is missing: CAs and service-account key once, then each leaf on its own (a PKI
        made before a leaf existed gains it; the serving certificate is remade if it lacks a name)."""
        out = cls(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if not (directory / "ca.key").exists():
            pki.new_ca("kubernetes").write(directory, "ca")
            pki.new_ca("front-proxy-ca").write(directory, "front-proxy-ca")
            sa = pki.new_key("rsa")
            (directory / "sa.key").write_bytes(pki.key_pem(sa))
            (directory / "sa.pub").write_bytes(pki.public_key_pem(sa))
        ca = pki.KeyPair.read(directory, "ca")
        if not out._serves(APISERVER_HOSTS):
            pki.new_leaf(ca, "kube-apiserver", usages=(pki.SERVER_AUTH,), days=3650,
                         hosts=APISERVER_HOSTS).write(directory, "apiserver")
        if not (directory / "front-proxy-client.key").exists():
            front = pki.KeyPair.read(directory, "front-proxy-ca")
            pki.new_leaf(front, FRONT_PROXY_CLIENT, days=3650).write(directory, "front-proxy-client")
        for stem, cn, orgs in (("admin", "kubernetes-admin", ["system:masters"]),
                               ("controller-manager", "system:kube-controller-manager", []),
                               ("scheduler", "system:kube-scheduler", []),
                               ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["system:masters"]),
                               ("vc-apiserver", VC_SERVICE_ACCOUNT, [])):
            if not (directory / f"{stem}.key").exists():
                pki.new_leaf(ca, cn, organizations=orgs, days=3650).write(directory, stem)
        return out

    def _serves(self, hosts: list[str]) -> bool:
        path = self.path("apiserver.crt")
        return path.exists() and set(hosts) <= pki.names(pki.load_cert(path.read_bytes()))

    def kubeconfig(self, server: str, stem: str) -> dict:  # type: ignore[type-arg]
        return pki.kubeconfig(server, self.path("ca.crt").read_bytes(), stem,
                              self.path(f"{stem}.crt").read_bytes(), self.path(f"{stem}.key").read_bytes(),
                              cluster="host")


@dataclass
class HostCluster:
    """A real host: etcd, kube-apiserver with the aggregation layer, controller-manager (node lifecycle
    on), kube-scheduler, and kwok keeping its simulated nodes Ready (Lease heartbeats) and running the
    pods bound to them."""

    root: Path
    port: int
    etcd_client_port: int
    etcd_peer_port: int
    run_dir: Path | None = None  # pid files when the host outlives this process (the playground)
    real_nodes: bool = False  # serve real kubelets: listen on the lab bridge
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def url_for_nodes(self) -> str:
        """Where kubelets and pods on real nodes reach this apiserver (its advertised address)."""
        return f"https://{LAB_GATEWAY}:{self.port}"

    @property
    def pki(self) -> HostPki:
        return HostPki(self.root / "pki")

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    def kubeconfig_for(self, stem: str) -> Path:
        path = self.root / f"{stem}.kubeconfig"
        if not path.exists():
            write_kubeconfig(path, self.pki.kubeconfig(self.url, stem))
        return path

    def _pidfile(self, name: str) -> Path | None:
        return self.run_dir / f"host-{name}.pid" if self.run_dir else None

    def _proc(self, name: str, args: list[str]) -> Proc:
        proc = Proc(name, args, self.root / "log" / f"{name}.log", self._pidfile(name))
        self.procs[name] = proc
        return proc

    def etcd(self) -> Etcd:
        return Etcd(self.root / "etcd", self.etcd_client_port, self.etcd_peer_port, self.root / "log" / "etcd.log",
                    self._pidfile("etcd"))

    def apiserver_args(self) -> list[str]:
        p = self.pki.path
        if self.real_nodes:
            # Reachable from the nodes' namespaces; the kubernetes Service's endpoint is that address.
            where = ["--bind-address=0.0.0.0", f"--advertise-address={LAB_GATEWAY}"]
        else:
            where = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
        return [binary("kube-apiserver"), *where, f"--secure-port={self.port}",
                f"--etcd-servers={self.etcd().url}",
                f"--tls-cert-file={p('apiserver.crt')}", f"--tls-private-key-file={p('apiserver.key')}",
                f"--client-ca-file={p('ca.crt')}",
                f"--requestheader-client-ca-file={p('front-proxy-ca.crt')}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={p('front-proxy-client.crt')}",
                f"--proxy-client-key-file={p('front-proxy-client.key')}",
                "--authorization-mode=Node,RBAC", "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={p('sa.pub')}", f"--service-account-signing-key-file={p('sa.key')}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", "--allow-privileged=true",
                f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
                f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--enable-admission-plugins=NodeRestriction", "--v=1"]

    def controller_manager_args(self) -> list[str]:
        kubeconfig = self.kubeconfig_for("controller-manager")
        p = self.pki.path
        return [binary("kube-controller-manager"), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
                f"--service-account-private-key-file={p('sa.key')}", f"--root-ca-file={p('ca.crt')}",
                "--use-service-account-credentials=true", f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
                "--profiling=false", "--v=1"]

    def scheduler_args(self) -> list[str]:
        kubeconfig = self.kubeconfig_for("scheduler")
        return [binary("kube-scheduler"), f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}", "--leader-elect=false", "--profiling=false", "--v=1"]

    def kwok_args(self) -> list[str]:
        return [binary("kwok"), f"--kubeconfig={self.kubeconfig_for('admin')}", "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-ip=127.0.0.1",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{free_port()}", "--cidr=10.244.0.1/16"]

    def ready(self) -> bool:
        if not self.pki.path("admin.key").exists():
            return False
        ctx = ssl.create_default_context(cafile=str(self.pki.path("ca.crt")))
        ctx.load_cert_chain(str(self.pki.path("admin.crt")), str(self.pki.path("admin.key")))
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=2, context=ctx) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def healthy(self) -> bool:
        """Every component running, the apiserver ready and listening where this host's mode needs it."""
        return self.ready() and self.listening_as_wanted() and all(
            Proc(name, [], Path("/dev/null"), self._pidfile(name)).alive() for name in self.components())

    def listening_as_wanted(self) -> bool:
        """The running kube-apiserver was started with this mode's addresses (the lab bridge with real nodes,
        loopback without): a host the playground started in its other mode is restarted, not reused. A host
        without pid files (a test's) is taken as it is."""
        pid = Proc("kube-apiserver", [], Path("/dev/null"), self._pidfile("kube-apiserver")).pid
        if pid is None:
            return True
        try:
            running = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        wanted = [str(a).encode() for a in self.apiserver_args() if str(a).startswith(("--bind-address=", "--advertise-address="))]
        return all(arg in running for arg in wanted)

    def components(self) -> tuple[str, ...]:
        """What runs besides etcd and kube-apiserver."""
        return ("kube-controller-manager", "kwok", "kube-scheduler")

    def start(self, timeout: float = 90.0) -> HostCluster:
        HostPki.ensure(self.root / "pki")
        write_kubeconfig(self.admin_kubeconfig, self.pki.kubeconfig(self.url, "admin"))
        etcd = self.etcd()
        if not etcd.healthy():
            etcd.stop()
            etcd.start()
        self.procs["etcd"] = etcd.proc or Proc("etcd", [], etcd.log, etcd.pidfile)
        self.start_apiserver(timeout)
        self._proc("kube-controller-manager", self.controller_manager_args()).start()
        self._proc("kwok", self.kwok_args()).start()
        self._proc("kube-scheduler", self.scheduler_args()).start()
        return self

    def stop_apiserver(self) -> None:
        (self.procs.get("kube-apiserver") or Proc("kube-apiserver", [], Path("/dev/null"),
                                                  self._pidfile("kube-apiserver"))).stop()

    def kill_apiserver(self) -> None:
        """SIGKILL, as a crash: no graceful shutdown."""
        (self.procs.get("kube-apiserver") or Proc("kube-apiserver", [], Path("/dev/null"),
                                                  self._pidfile("kube-apiserver"))).kill()

    def start_apiserver(self, timeout: float = 90.0) -> None:
        api = self._proc("kube-apiserver", self.apiserver_args()).start()
        try:
            wait_until(self.ready, timeout, "host kube-apiserver", interval=0.25)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{api.tail()}") from None

    def stop(self) -> None:
        for name in ("kube-scheduler", "kwok", "kube-controller-manager", "kube-apiserver", "etcd"):
            (self.procs.get(name) or Proc(name, [], Path("/dev/null"), self._pidfile(name))).stop()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([binary("kubectl"), "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc


ZONES = ("zone-a", "zone-b", "zone-c")
INSTANCE_TYPES = (("m5.2xlarge", "8", "32Gi"), ("m5.4xlarge", "16", "64Gi"))


def fake_node(name: str, index: int, control_plane: bool = False, labels: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    """A host Node that kwok keeps Ready, with realistic labels and capacity."""
    instance, cpu, memory = INSTANCE_TYPES[0] if index % 4 else INSTANCE_TYPES[1]
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                   "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
                   "node.kubernetes.io/instance-type": instance, "type": "kwok", **(labels or {})}
    if control_plane:
        node_labels["node-role.kubernetes.io/control-plane"] = ""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
                     if control_plane else []},
            "status": {"capacity": resources, "allocatable": resources}}


def create_fake_nodes(host: HostCluster, count: int, prefix: str = "node", control_plane: bool = True) -> list[str]:
    nodes = [fake_node(f"{prefix}-{i:03d}", i) for i in range(count)]
    if control_plane:
        nodes.append(fake_node(f"{prefix}-control-plane", 0, control_plane=True))
    host.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return [n["metadata"]["name"] for n in nodes]
