"""The whole stack: a host, vc-apiserver's dedicated etcd, vc-apiserver registered as an APIService,
and optionally real nodes. What ``make up`` runs and what the host end-to-end tests start."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from apiserver import IMAGE
from apiservice import install
from apiservice.kubectl import Kubectl as InstallKubectl
from apiservice.manifests import DEPLOYMENT, NAMESPACE
from hack.harness import (
    BIN,
    LAB_GATEWAY,
    REPO,
    ApiServer,
    Etcd,
    HostCluster,
    Pki,
    binary,
    create_fake_nodes,
    free_port,
)
from hack.realnodes import CONTROL_PLANE_ROLE, REAL_NODE_LABEL, STORAGE_CLASS, RealNodeLab

IN_CLUSTER_OVERLAY = REPO / "hack" / "in-cluster"  # deploy/cluster-agent fitted to the real-node lab
SLICE_KUBELET_SERVICE = "kube-system/vc-slice-kubelet"  # the host Service the shared kubelet API is published as


@dataclass
class StackPorts:
    host_apiserver: int
    host_etcd: int
    host_etcd_peer: int
    vc_etcd: int
    vc_etcd_peer: int
    vc_apiserver: int

    @classmethod
    def free(cls) -> StackPorts:
        return cls(*(free_port() for _ in range(6)))


@dataclass
class Stack:
    """What ``make up`` runs and what the host end-to-end tests start: one definition of both."""

    root: Path
    ports: StackPorts
    runtime: str = "process"  # the control-plane runtime of vc-apiserver ("none" to build none)
    run_dir: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    real_nodes: int = 0  # kubelet + containerd nodes besides the kwok ones (hack/realnodes.py); promoted by agents
    # "local": vc-apiserver a process on the aggregator's loopback; "cluster" (real nodes only): installed
    # inside the host from its image by `python -m apiservice install --mode cluster`, with its etcd
    vc_mode: str = "local"
    host: HostCluster = field(init=False)
    etcd: Etcd = field(init=False)
    api: ApiServer = field(init=False)

    def __post_init__(self) -> None:
        p = self.ports
        self.host = HostCluster(self.root / "host", p.host_apiserver, p.host_etcd, p.host_etcd_peer, self.run_dir,
                                real_nodes=self.real_nodes > 0)
        pid = (lambda name: self.run_dir / f"{name}.pid") if self.run_dir else (lambda name: None)
        self.etcd = Etcd(self.root / "data" / "etcd", p.vc_etcd, p.vc_etcd_peer, self.root / "log" / "etcd.log",
                         pid("etcd"))
        serving = self.root / "serving"
        if self.real_nodes:
            agents = self.agent_certs
            self.extra_args = [
                "--node-joiner", "agent", "--node-agent-ca-file", str(agents / "node-agent-ca.crt"),
                "--node-agent-client-cert-file", str(agents / "node-agent-client.crt"),
                "--node-agent-client-key-file", str(agents / "node-agent-client.key"),
                "--snapshot-volume-size", "1Gi",
                # shared slices run as real containers on the real nodes (never on kwok's), either one
                "--slice-node-selector", f"{REAL_NODE_LABEL}=true",
                "--slice-tolerations", f"{CONTROL_PLANE_ROLE}:NoSchedule",
                "--slice-storage-classes", STORAGE_CLASS, *self.extra_args]
        # the shared nodes' kubelet API where tenant apiservers reach this machine: the lab's gateway, published
        # as a host NodePort Service (so the shared nodes report a real node's address, where NodePorts answer);
        # or loopback, where kwok's nodes have no proxy to publish it through
        kubelet_api = ["--slice-kubelet-port", str(free_port()),
                       "--slice-kubelet-address", LAB_GATEWAY if self.real_nodes else "127.0.0.1",
                       *(["--slice-kubelet-service", SLICE_KUBELET_SERVICE] if self.real_nodes else [])]
        args = ["--control-plane-runtime", self.runtime, "--runtime-dir", str(self.root / "tenants"), *kubelet_api,
                "--runtime-bin-dir", str(BIN), "--encryption-key-file", str(self.root / "encryption.key"),
                *self.extra_args]
        self.api = ApiServer(Pki(serving), self.etcd.url, p.vc_apiserver, self.root / "log" / "vc-apiserver.log",
                             pid("vc-apiserver"), extra_args=args,
                             host_kubeconfig=self.root / "host" / "vc-apiserver.kubeconfig",
                             serving=(serving / "serving.crt", serving / "serving.key"))

    @property
    def kubeconfig(self) -> Path:
        """The host admin's kubeconfig: everything reaches vc-apiserver through the aggregator."""
        return self.host.admin_kubeconfig

    @property
    def agent_certs(self) -> Path:
        """The node agents' PKI, as ``python -m apiservice certs --node-joiner agent`` makes it."""
        return self.root / "agent-pki"

    def lab(self) -> RealNodeLab:
        return RealNodeLab(self.host, self.root / "nodes", self.real_nodes)

    def up(self, nodes: int = 4, say: Callable[[str], None] = lambda _: None) -> list[str]:
        """Start what is not healthy; returns the names of what was started."""
        from apiserver.storage.secrets import generate_key_file
        from apiservice import tls

        started = []
        if not self.real_nodes and self.lab().existing():
            # before the host restarts in its other mode: until then the real nodes still reach it
            self.remove_real_nodes(say)
        if not self.host.healthy():
            self.host.stop()
            self.host.start()
            started.append("host")
            say(f"host cluster    started at {self.host.url}" + (" (listening on the lab bridge too)" if self.real_nodes else ""))
        else:
            say(f"host cluster    already healthy at {self.host.url}")
        existing = {n for n in self.host.kubectl("get", "nodes", "-o", "name").stdout.split()}
        if self.real_nodes and "node/node-control-plane" in existing:
            # The kwok control-plane node of an earlier `make up`: with real nodes the control plane is a real one.
            self.host.kubectl("delete", "node", "node-control-plane", "--wait=false", check=False)
            existing.discard("node/node-control-plane")
            say("host nodes      removed the kwok control-plane node of the playground without real nodes")
        if len([n for n in existing if n != "node/node-control-plane"]) < nodes or (
                not self.real_nodes and "node/node-control-plane" not in existing):
            # With real nodes, the control-plane node is a real one (tenant control planes run there).
            create_fake_nodes(self.host, nodes, control_plane=not self.real_nodes)
            say(f"host nodes      {nodes} kwok nodes" + ("" if self.real_nodes else " + 1 control-plane node"))
        if not self.etcd.healthy():
            self.etcd.stop()
            self.etcd.start()
            started.append("etcd")
            say(f"etcd            started at {self.etcd.url}")
        else:
            say(f"etcd            already healthy at {self.etcd.url}")
        if not (self.root / "encryption.key").exists():
            generate_key_file(self.root / "encryption.key")
        tls.ensure_certs(self.root / "serving", local=True)
        if self.real_nodes:
            tls.ensure_node_agent(tls.CertDir(self.agent_certs))
            for node in self.lab().up(say=say):
                node.start_agent(self.agent_certs)
        if self.vc_mode == "cluster":
            self.serve_in_cluster(say)
            return started
        return started + self.serve_locally(say)

    def _kubectl(self) -> InstallKubectl:
        return InstallKubectl(str(binary("kubectl")), self.kubeconfig)

    def serve_in_cluster(self, say: Callable[[str], None] = lambda _: None, timeout: float = 180.0) -> None:
        """vc-apiserver as a Deployment of its image with its etcd StatefulSet, on the control-plane node; the
        local server stops first (one reconciler acts on the host at a time). Needs real nodes."""
        assert self.real_nodes, "in-cluster vc-apiserver needs real nodes"
        kubectl = self._kubectl()
        if self.api.ready():
            say("vc-apiserver    the local one stopped, with its process-runtime tenants (they live in its etcd)")
        self.api.stop()
        self._stop_local_tenants()
        install.install(kubectl, "cluster", self.agent_certs, None, IMAGE, timeout,
                        lambda line: say(f"  apiservice: {line}"), joiner="agent", overlay=IN_CLUSTER_OVERLAY)
        say(f"vc-apiserver    installed in the host from {IMAGE} (kosmos-system, pods runtime, node agents), "
            "registered as APIService v1alpha1.kosmos.io")

    def serve_locally(self, say: Callable[[str], None] = lambda _: None) -> list[str]:
        """vc-apiserver as a process on the aggregator's loopback; an in-cluster installation goes first
        (its namespace with it, its etcd volume given back)."""
        kubectl = self._kubectl()
        started = []
        if self.real_nodes and self.installed_in_cluster():
            install.uninstall(kubectl, ("cluster",), 180.0, lambda line: say(f"  apiservice: {line}"))
        self.host.kubeconfig_for("vc-apiserver")
        restart = not self.api.ready()
        if restart:
            # It waits for its RBAC on the host (applied by the installer below) before serving.
            self.api.stop()
            self.api.start(wait=False)
            started.append("vc-apiserver")
        install.install(kubectl, "local", self.root / "serving", self.ports.vc_apiserver, None, 90.0,
                        lambda line: say(f"  apiservice: {line}"))
        self.api.wait_ready(30.0)
        say(f"vc-apiserver    {'started' if restart else 'already ready'} at {self.api.url} "
            f"({self.runtime} runtime), registered as APIService v1alpha1.kosmos.io")
        return started

    def installed_in_cluster(self) -> bool:
        return self.host.kubectl("get", "deployment", DEPLOYMENT, "-n", NAMESPACE, check=False).returncode == 0

    def remove_real_nodes(self, say: Callable[[str], None] = lambda _: None) -> None:
        """What a playground with real nodes left, for one without: the in-cluster vc-apiserver (its
        VirtualClusters first) and the real nodes, their state and their Node objects."""
        self._uninstall_in_cluster()
        self.lab().down()
        say("real nodes      removed, with vc-apiserver's installation in the host (this playground has none)")

    def _uninstall_in_cluster(self) -> None:
        if (self.root / "nodes").exists() and self.host.ready() and self.installed_in_cluster():
            # Its etcd's volume goes with the real nodes' state: its VirtualClusters go first, so their
            # control planes and nodes are released, then the installation, so nothing of it comes back
            # broken with the next `make up`. Nodes that no longer reach the host (an interrupted run) keep
            # its pods terminating: the teardown goes on, and removing the nodes lets the host finish.
            self.host.kubectl("delete", "vc", "--all", "-A", "--wait", "--timeout=100s", check=False)
            try:
                install.uninstall(self._kubectl(), ("cluster",), 120.0, lambda _: None)
            except install.InstallError as e:
                print(f"playground: vc-apiserver's installation not fully removed yet ({e}); going on")

    def _stop_local_tenants(self) -> None:
        """The process runtime's tenant control planes, whose vc-apiserver is stopping for good."""
        for pidfile in (self.root / "tenants").glob("*/*/*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.killpg(int(pidfile.read_text().strip()), signal.SIGKILL)

    def down(self) -> None:
        self._uninstall_in_cluster()
        if self.real_nodes or (self.root / "nodes").exists():
            self.lab().down()
        self.api.stop()
        self._stop_local_tenants()
        self.etcd.stop()
        self.host.stop()
