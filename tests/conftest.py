"""Fixtures: real etcd and a real vc-apiserver, started through the shared harness."""

from __future__ import annotations

import itertools
import json
import os
import ssl
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hack.harness import REPO, ApiServer, Etcd, Pki, binary, free_port
from hack.realnodes import RealNodeLab
from hack.stack import Stack, StackPorts
from tests.support import report
from tests.support.differential import DifferentialLab
from tests.support.durations import Durations

EXAMPLES = REPO / "examples"
HISTORY = 200  # watch-cache history of the test server: small enough to expire in a test
_counter = itertools.count()


# A parallel run (``make test``: ``pytest -n 3 --dist loadgroup``) keeps each file on one worker, so a
# module's fixtures start once, and sends files that share a lab of which a machine holds only one to
# the same worker: the real-node lab (one bridge, fixed addresses; its images built once) and the
# differential lab; the two files on the playground share it too, so it starts once. The longest
# groups are handed out first, so none of them is left to run alone at the end; the order is
# measured (.local/test-durations.txt), not promised.
SHARED_LABS = {
    "real-nodes": ("test_real_lifecycle.py", "test_in_cluster.py", "test_real_nodes.py", "test_images.py",
                   "test_real_rotation.py", "test_slice_apps.py", "test_conformance.py"),
    "differential": ("test_differential.py", "test_managedfields_differential.py"),
    "playground": ("test_docs.py", "test_metering.py", "test_kubectl_plugin.py"),  # one process_host, as `make up` starts it
}
LONGEST_FIRST = ("real-nodes", "test_shared_slices.py", "test_hibernation.py", "test_control_plane.py",
                 "test_chaos.py", "test_promotion.py", "test_overload.py", "test_backup.py",
                 "test_apiservice.py", "test_faults_etcd.py", "test_pods_runtime.py", "playground")


def group_of(item: pytest.Item) -> str:
    path = item.path
    if path.parent.name == "unit":
        return "unit"  # a thousand quick specs: one unit of work, not a thousand
    return next((lab for lab, files in SHARED_LABS.items() if path.name in files), path.name)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    groups = {item: group_of(item) for item in items}
    for item, group in groups.items():
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: rank.get(groups[item], len(rank)))  # stable: files keep their order


def pytest_configure(config: pytest.Config) -> None:
    report.bind(config)  # what tests say reaches the terminal even while pytest captures output
    if not hasattr(config, "workerinput"):  # the controller of a parallel run sees every report
        config.pluginmanager.register(Durations(REPO / ".local" / "test-durations.txt"), "vc-durations")


@pytest.fixture(scope="session")
def tmp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vc")


@pytest.fixture(scope="session")
def pki_files(tmp_root: Path) -> Pki:
    return Pki.ensure(tmp_root / "pki")


def start_etcd(root: Path, name: str, extra_args: list[str] | None = None) -> Etcd:
    return Etcd(root / name, free_port(), free_port(), root / f"{name}.log", extra_args=extra_args or []).start()


@pytest.fixture(scope="session")
def etcd(tmp_root: Path) -> Iterator[Etcd]:
    server = start_etcd(tmp_root, "etcd")
    yield server
    server.stop()


@dataclass
class Server:
    api: ApiServer
    pki: Pki
    kubeconfig: Path
    user_kubeconfig: Path

    @property
    def url(self) -> str:
        return self.api.url

    def ssl(self, user: str | None = "admin") -> ssl.SSLContext:
        return self.pki.ssl_context(user)


@pytest.fixture(scope="session")
def server(tmp_root: Path, pki_files: Pki, etcd: Etcd) -> Iterator[Server]:
    api = ApiServer(pki_files, etcd.url, free_port(), tmp_root / "vc-apiserver.log",
                    extra_args=["--identity", "test", "--leader-elect-lease-duration", "5",
                                "--watch-cache-history", str(HISTORY)]).start()
    srv = Server(api, pki_files, api.kubeconfig(tmp_root / "kubeconfig"),
                 api.kubeconfig(tmp_root / "user.kubeconfig", user="user"))
    yield srv
    api.stop()


@pytest.fixture
def log_start(server: Server) -> int:
    """Where the server's log stood when the test began: nothing after it may be a traceback."""
    return server.api.log.stat().st_size


@dataclass
class Kubectl:
    kubeconfig: Path
    host_namespaces: bool = False  # through a host: namespaces must exist there before use

    def argv(self, *args: str) -> list[str]:
        """The command line of kubectl ``args`` (for one that streams: ``logs -f``, ``attach``, ``port-forward``)."""
        return [str(binary("kubectl")), "--kubeconfig", str(self.kubeconfig), *args]

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args),
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def ensure_namespace(self, name: str) -> str:
        if self.host_namespaces:
            out = self.run("create", "namespace", name, check=False)
            assert out.returncode == 0 or "AlreadyExists" in out.stderr, out.stderr
        return name


@pytest.fixture(scope="session")
def host_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A real host whose aggregator serves VirtualClusters from a vc-apiserver (no control-plane runtime),
    its processes known by pidfiles as ``make up`` leaves them."""
    root = tmp_path_factory.mktemp("host")
    yield from running_stack(root, runtime="none", run_dir=root / "run",
                             extra_args=["--watch-cache-history", str(HISTORY)])


@pytest.fixture(scope="session")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The real-node lab, once per run: a host with a scheduler and node lifecycle, two kubelet +
    containerd nodes (hack/realnodes.py) with a node agent each, kwok nodes beside them, and
    vc-apiserver building tenant control planes as host pods (the ``pods`` runtime, on the
    control-plane node) and promoting nodes through the agents."""
    # a service-account key rotation drops the old key 10 s after the new one signs, not the hour kubelets
    # need in production (test_real_rotation.py); an upgrade whose apiserver does not come up rolls back after
    # 45 s, not 120 (test_real_lifecycle.py)
    yield from running_stack(tmp_path_factory.mktemp("real"), runtime="pods", real_nodes=2,
                             extra_args=["--service-account-key-rotation-overlap", "10", "--upgrade-timeout", "45"])


@pytest.fixture(scope="session")
def process_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The playground as ``make up`` starts it (a host with 4 kwok nodes, vc-apiserver building tenant
    control planes as processes), shared by the modules that leave it as they found it."""
    yield from process_stack(tmp_path_factory.mktemp("process"), 4, 5)


@pytest.fixture(scope="session")
def real_lab(real_stack: Stack) -> RealNodeLab:
    return real_stack.lab()


@pytest.fixture(scope="session")
def differential_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DifferentialLab]:
    """kube-apiserver serving the CRD generated from our schema, and vc-apiserver (through a host's
    aggregator too, once asked for): what the differential suites compare."""
    lab = DifferentialLab(tmp_path_factory.mktemp("differential"))
    try:
        yield lab.start()
    finally:
        lab.stop()


@pytest.fixture(scope="session", params=["direct", "via-host"])
def kubectl(request: pytest.FixtureRequest) -> Kubectl:
    """kubectl against vc-apiserver directly, and through a host kube-apiserver's aggregator."""
    if request.param == "direct":
        return Kubectl(request.getfixturevalue("server").kubeconfig)
    return Kubectl(request.getfixturevalue("host_stack").kubeconfig, host_namespaces=True)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace of its own for each test (created on the host when the test goes through one)."""
    name = f"t{os.getpid() % 10000}-{next(_counter)}"
    if "kubectl" in request.fixturenames:
        request.getfixturevalue("kubectl").ensure_namespace(name)
    return name


@pytest.fixture
async def http(server: Server) -> Any:
    """An aiohttp session authenticated as the playground admin (system:masters)."""
    async with aiohttp.ClientSession(base_url=server.url,
                                     connector=aiohttp.TCPConnector(ssl=server.ssl("admin"))) as session:
        yield session


def vc(name: str, namespace: str, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """A VirtualCluster manifest."""
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec or {}}


def tenant_processes(base: Path) -> dict[int, str]:
    """Live processes (pid -> program name) whose command line points into a tenant's directory."""
    marker = str(base).encode() + b"/"
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found[int(proc.name)] = Path(cmdline.split(b"\0")[0].decode()).name
    return found


def running_stack(root: Path, *, nodes: int = 2, lease_seconds: int = 5, extra_args: Sequence[str] = (),
                  **kwargs: Any) -> Iterator[Stack]:
    """A lab host with ``nodes`` kwok nodes and vc-apiserver behind its aggregator (``kwargs``: the
    :class:`Stack`'s runtime, real nodes...), up for as long as the fixture yielding from this lasts,
    and taken down however it ends."""
    stack = Stack(root, StackPorts.free(),
                  extra_args=["--leader-elect-lease-duration", str(lease_seconds), *extra_args], **kwargs)
    try:
        stack.up(nodes=nodes)
        yield stack
    finally:
        stack.down()


def process_stack(root: Path, nodes: int, lease_seconds: int) -> Iterator[Stack]:
    """A host with ``nodes`` kwok nodes and a vc-apiserver building tenant control planes as processes."""
    yield from running_stack(root, nodes=nodes, lease_seconds=lease_seconds, runtime="process")
