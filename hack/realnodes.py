"""Real nodes on one machine: kubelet + containerd pairs, each in a network namespace of its own.

Each node is what a host node is in production, scaled down: its own network namespace (an address
on the lab bridge, its own loopback, its own iptables, so hostNetwork pods, kube-proxy and the
kubelet's port 10250 behave as on separate machines), its own containerd (root, state, socket, runc
root, CNI bridge and pod subnet), its own cgroup root, and a kubeadm-like kubelet layout
(``etc/kubernetes/kubelet.conf``, ``etc/kubernetes/pki/ca.crt``,
``var/lib/kubelet/pki/kubelet-client-current.pem``), which is exactly what the node agent re-points.

The network, one bridge in the root namespace and static routes (host-gw style)::

    root ns: bridge vcnodes 10.99.0.1/24 ── veth ── node i: eth0 10.99.0.(10+i), pods 10.200.i.0/24 on cni0
             route 10.200.i.0/24 via 10.99.0.(10+i)           default via 10.99.0.1
             route 10.96.0.0/16 (Services) via the control-plane node, whose kube-proxy forwards them

Processes enter a node's namespace with ``nsenter --net`` only: the mount namespace stays the
machine's, so cgroups, overlay mounts and the kubelet's bind mounts are where runc expects them.
Everything is undone by :meth:`RealNode.destroy` and :func:`destroy_network`: pods' containers,
processes, mounts, cgroups, bridges, routes, namespaces, state directories and ``ip_forward``.

  python -m hack.realnodes restart-kubelet --node-dir DIR   what a node agent's restart command runs
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from certs import pki
from hack import labstorage
from hack.harness import (
    LAB_GATEWAY,
    REPO,
    SERVICE_CIDR,
    HostCluster,
    Proc,
    binary,
    wait_until,
    write_kubeconfig,
)
from reconciler import versions
from reconciler.controlplane import addons
from reconciler.nodeagent import DEFAULT_PORT as AGENT_PORT
from reconciler.nodeagent.files import KUBEADM

BRIDGE = "vcnodes"
GATEWAY = LAB_GATEWAY  # the machine on the lab bridge: where nodes reach the host and tenant apiservers
LAB_PREFIX = 24
POD_NETWORK = "10.200.0.0/16"
CLUSTER_DNS = "10.96.0.10"
KUBELET_PORT = 10250
HEALTHZ_PORT = 10248
NODE_USER, NODES_GROUP = "system:node:", "system:nodes"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PAUSE_IMAGE = f"registry.k8s.io/pause:{versions.PAUSE_VERSION}"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
REAL_NODE_LABEL = "lab.kosmos.io/real-node"  # set by the kubelets: where the host's add-ons may run (not kwok)
STORAGE_CLASS = "local"


def run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, input=input, timeout=60)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
    return proc


def require_tools() -> None:
    """The node packages (hack/node-packages.sh); a missing one is an error, never a reason to skip."""
    missing = [t for t in ("containerd", "runc", "ctr", "ip", "nsenter", "iptables") if shutil.which(t) is None]
    missing += [p for p in ("/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap",
                            "/usr/lib/cni/loopback") if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"missing for real nodes: {', '.join(missing)}: run hack/node-packages.sh")
    if os.geteuid() != 0:
        raise PermissionError("real nodes need root (network namespaces, cgroups, containerd)")


# -- the lab network --------------------------------------------------------------------------

def ensure_network() -> None:
    """The lab bridge with the machine's address on it, and forwarding between nodes."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    if GATEWAY not in run("ip", "-4", "addr", "show", BRIDGE).stdout:
        run("ip", "addr", "add", f"{GATEWAY}/{LAB_PREFIX}", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    saved = Path("/run/vcnodes-ip-forward")
    if not saved.exists():
        saved.write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def destroy_network() -> None:
    run("ip", "link", "del", BRIDGE, check=False)
    saved = Path("/run/vcnodes-ip-forward")
    if saved.exists():
        Path("/proc/sys/net/ipv4/ip_forward").write_text(saved.read_text())
        saved.unlink()


def _reference(archive: Path) -> str:
    """The image name an archive carries (its info.json, written beside it by hack/images)."""
    try:
        return str(json.loads((archive.parent / "info.json").read_text())["ref"])
    except (OSError, ValueError, KeyError):
        return ""


def node_address(index: int) -> str:
    return str(ipaddress.ip_address(GATEWAY) + 9 + index)


def pod_subnet(index: int) -> str:
    net = ipaddress.ip_network(POD_NETWORK)
    return str(list(net.subnets(new_prefix=24))[index])


# -- one node ---------------------------------------------------------------------------------

@dataclass
class RealNode:
    """A kubelet + containerd pair in its own network namespace, registered with ``host``."""

    name: str
    index: int  # 1..; decides the address and the pod subnet
    root: Path
    control_plane: bool = False

    @property
    def netns(self) -> str:
        return f"vcn-{self.name}"

    @property
    def address(self) -> str:
        return node_address(self.index)

    @property
    def subnet(self) -> str:
        return pod_subnet(self.index)

    @property
    def veth(self) -> str:
        return f"vcn{self.index}h"

    @property
    def cgroup(self) -> str:
        return f"vcnode-{self.name}"

    # the kubeadm layout the node agent manages, below the node's directory
    @property
    def kubeconfig(self) -> Path:
        return KUBEADM.under(self.root).kubeconfig

    @property
    def ca(self) -> Path:
        return KUBEADM.under(self.root).ca

    @property
    def credential(self) -> Path:
        return KUBEADM.under(self.root).credential

    @property
    def kubelet_root(self) -> Path:
        return self.root / "var/lib/kubelet"

    @property
    def static_pods(self) -> Path:
        return self.root / "etc/kubernetes/manifests"

    @property
    def socket(self) -> Path:
        return self.root / "run/containerd/containerd.sock"

    def _enter(self, *command: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *command]

    def proc(self, component: str) -> Proc:
        return Proc(f"{self.name}-{component}", [], self.root / "log" / f"{component}.log",
                    self.root / "run" / f"{component}.pid")

    # -- set-up -------------------------------------------------------------------------

    def create_network(self) -> None:
        if run("ip", "netns", "list").stdout.split().count(self.netns) == 0:
            run("ip", "netns", "add", self.netns)
        ns = ("ip", "-n", self.netns)
        if run(*ns, "link", "show", "eth0", check=False).returncode != 0:
            run("ip", "link", "del", self.veth, check=False)
            run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        run("ip", "link", "set", self.veth, "master", BRIDGE, "up")
        if self.address not in run(*ns, "-4", "addr", "show", "eth0").stdout:
            run(*ns, "addr", "add", f"{self.address}/{LAB_PREFIX}", "dev", "eth0")
        run(*ns, "link", "set", "eth0", "up")
        run(*ns, "link", "set", "lo", "up")
        run(*ns, "route", "replace", "default", "via", GATEWAY)
        run("ip", "route", "replace", self.subnet, "via", self.address)
        run(*self._enter("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))

    def create_cgroups(self) -> None:
        """The node's cgroup root in every v1 hierarchy (cpuset needs its cpus and mems filled)."""
        for hierarchy in sorted(CGROUP_ROOT.iterdir()):
            if not hierarchy.is_dir() or hierarchy.is_symlink():
                continue
            path = hierarchy / self.cgroup
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((hierarchy / knob).read_text())

    def write_pki(self, host: HostCluster) -> None:
        """The kubelet is system:node:NAME of the host; its credential is a dated file behind a
        symlink, as kubeadm lays it out. The same CA file is the kubelet's client CA."""
        ca = pki.KeyPair.read(host.pki.dir, "ca")
        if not self.credential.exists():
            cred = pki.new_leaf(ca, NODE_USER + self.name, organizations=[NODES_GROUP], days=3650)
            dated = self.credential.with_name("kubelet-client-2026-01-01-00-00-00.pem")
            dated.parent.mkdir(parents=True, exist_ok=True)
            dated.write_bytes(cred.cert_pem + cred.key_pem)
            dated.chmod(0o600)
            self.credential.symlink_to(dated.name)
        self.ca.parent.mkdir(parents=True, exist_ok=True)
        self.ca.write_bytes(ca.cert_pem)
        config = pki.kubeconfig(host.url_for_nodes, ca.cert_pem, NODE_USER + self.name, cluster="host")
        config["clusters"][0]["cluster"] = {"server": host.url_for_nodes, "certificate-authority": str(self.ca)}
        config["users"][0]["user"] = {"client-certificate": str(self.credential), "client-key": str(self.credential)}
        write_kubeconfig(self.kubeconfig, config)

    def write_containerd_config(self, pause_image: str) -> Path:
        d = self.root
        config = f"""version = 2
root = "{d}/var/lib/containerd"
state = "{d}/run/containerd"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt/containerd"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
        Root = "{d}/run/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/etc/cni/net.d"
"""
        path = d / "etc/containerd/config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config)
        cni = {"cniVersion": "0.4.0", "name": "vcnode", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]],
                      "dataDir": str(d / "var/lib/cni/networks")}},
            {"type": "portmap", "capabilities": {"portMappings": True}}]}
        conf = d / "etc/cni/net.d/10-vcnode.conflist"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(json.dumps(cni, indent=1))
        return path

    def write_kubelet_config(self) -> Path:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "0.0.0.0", "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": self.address, "healthzPort": HEALTHZ_PORT,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.ca)}},
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{self.cgroup}", "failCgroupV1": False,
            "failSwapOn": False, "podLogsDir": str(self.root / "var/log/pods"),
            "staticPodPath": str(self.static_pods),
            "clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local",
            "resolvConf": str(self._resolv_conf()),
            "rotateCertificates": False, "serverTLSBootstrap": False,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "maxPods": 50, "serializeImagePulls": False,
            "registerWithTaints": ([{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}]
                                   if self.control_plane else []),
        }
        path = self.root / "var/lib/kubelet/config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.static_pods.mkdir(parents=True, exist_ok=True)
        return path

    def _resolv_conf(self) -> Path:
        """Pods with dnsPolicy Default get the machine's resolvers minus loopback ones (unreachable from
        a pod); an empty file when none is left, as a kubelet on an offline machine would have."""
        path = self.root / "etc/resolv.conf"
        lines = []
        with contextlib.suppress(FileNotFoundError):
            for line in Path("/etc/resolv.conf").read_text().splitlines():
                parts = line.split()
                if parts[:1] == ["nameserver"] and len(parts) > 1 and parts[1].startswith("127."):
                    continue
                lines.append(line)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    def kubelet_command(self) -> list[str]:
        return self._enter(
            binary("kubelet"), f"--config={self.root / 'var/lib/kubelet/config.yaml'}",
            f"--kubeconfig={self.kubeconfig}", f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.kubelet_root / 'pki'}", f"--hostname-override={self.name}",
            f"--node-ip={self.address}", f"--node-labels={REAL_NODE_LABEL}=true", "--v=1")

    # -- processes ------------------------------------------------------------------------

    def start_containerd(self, timeout: float = 30.0) -> None:
        proc = self.proc("containerd")
        if proc.alive():
            return
        config = self.root / "etc/containerd/config.toml"
        proc.args = self._enter("containerd", "--config", str(config), "--log-level", "warn")
        proc.start()
        wait_until(lambda: self.ctr("version", check=False).returncode == 0, timeout,
                   f"containerd of {self.name}")

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run("ctr", "-a", str(self.socket), "-n", "k8s.io", *args, check=check)

    def running_pods(self) -> set[tuple[str, str]]:
        """(namespace, name) of every pod with a running container on this node, as containerd sees it."""
        out = set()
        for line in self.ctr("tasks", "list").stdout.splitlines()[1:]:
            task, _pid, state = line.split()[:3]
            if state != "RUNNING":
                continue
            info = json.loads(self.ctr("containers", "info", task).stdout)
            labels = info.get("Labels") or {}
            if "io.kubernetes.pod.name" in labels:
                out.add((labels["io.kubernetes.pod.namespace"], labels["io.kubernetes.pod.name"]))
        return out

    def import_images(self, archives: list[Path]) -> None:
        """Each archive into this node's containerd (the k8s.io namespace the kubelet uses), once."""
        present = set(self.ctr("images", "list", "-q").stdout.split())
        for archive in archives:
            if _reference(archive) not in present:
                self.ctr("images", "import", str(archive))

    def kubelet_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}:{HEALTHZ_PORT}/healthz", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start_kubelet(self, timeout: float = 60.0) -> None:
        proc = self.proc("kubelet")
        if proc.alive():
            return
        proc.args = self.kubelet_command()
        proc.start()
        try:
            wait_until(self.kubelet_healthy, timeout, f"kubelet of {self.name}", interval=0.25)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{proc.tail()}") from None

    def restart_kubelet(self, timeout: float = 60.0) -> None:
        """Stop the kubelet and start it on whatever its files now say (the node agent's restart)."""
        self.proc("kubelet").stop(timeout=20)
        self.start_kubelet(timeout)

    def stop_kubelet(self) -> None:
        self.proc("kubelet").stop(timeout=20)

    def kill_kubelet(self) -> None:
        self.proc("kubelet").signal(signal.SIGKILL)

    def start_agent(self, certs: Path, timeout: float = 30.0) -> None:
        """The node agent, in the node's namespace on its default port, as its static pod runs it; its
        restart command restarts this node's kubelet (no systemd here)."""
        proc = self.proc("node-agent")
        if proc.alive():
            return
        restart = [sys.executable, "-m", "hack.realnodes", "restart-kubelet", "--node-dir", str(self.root)]
        proc.args = self._enter(
            sys.executable, "-m", "reconciler.nodeagent", "--tls-cert", str(certs / "node-agent-serving.crt"),
            "--tls-key", str(certs / "node-agent-serving.key"), "--client-ca", str(certs / "node-agent-client-ca.crt"),
            "--node-name", self.name, "--state-dir", str(self.root / "var/lib/kosmos-node-agent"),
            "--kubelet-kubeconfig", str(self.kubeconfig), "--kubelet-ca", str(self.ca),
            "--kubelet-client-cert", str(self.credential), "--restart-command", shlex.join(restart),
            "--restart-timeout", "90")
        proc.start(env={"PYTHONPATH": str(REPO)})

        def listening() -> bool:
            with socket.create_connection((self.address, AGENT_PORT), timeout=1):
                return True
        try:
            wait_until(listening, timeout, f"node agent of {self.name}", interval=0.2)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{proc.tail()}") from None

    def start(self, host: HostCluster, images: list[Path], pause_image: str) -> RealNode:
        require_tools()
        for sub in ("log", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "node.json").write_text(json.dumps(
            {"name": self.name, "index": self.index, "controlPlane": self.control_plane}))
        self.create_network()
        self.create_cgroups()
        self.write_pki(host)
        self.write_containerd_config(pause_image)
        self.write_kubelet_config()
        self.start_containerd()
        self.import_images(images)
        self.start_kubelet()
        return self

    # -- teardown -------------------------------------------------------------------------

    def destroy(self) -> None:
        """Leave nothing: processes, containers, mounts, cgroups, routes, namespace, files."""
        self.proc("node-agent").stop()
        self.stop_kubelet()
        if self.proc("containerd").alive():
            listed = self.ctr("tasks", "list", "-q", check=False).stdout.split()
            for task in listed:
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
            for _ in range(20):
                if not self.ctr("tasks", "list", "-q", check=False).stdout.split():
                    break
                time.sleep(0.25)
            for task in listed:
                self.ctr("tasks", "delete", "-f", task, check=False)
            for container in self.ctr("containers", "list", "-q", check=False).stdout.split():
                self.ctr("containers", "delete", container, check=False)
        self.proc("containerd").stop(timeout=20)
        self._kill_leftovers()
        self._remove_pod_namespaces()
        self._unmount()
        self._remove_cgroups()
        run("ip", "route", "del", self.subnet, check=False)
        run("ip", "link", "del", self.veth, check=False)
        run("ip", "netns", "del", self.netns, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """Shims and containers that outlived containerd: every process in the node's cgroups, and
        shims started for this containerd's socket."""
        pids: set[int] = set()
        for tasks in (CGROUP_ROOT / "pids" / self.cgroup).rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(p) for p in tasks.read_text().split()}
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if str(self.socket).encode() in cmdline.read_bytes():
                    pids.add(int(cmdline.parent.name))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if pids:
            time.sleep(0.3)

    def _remove_pod_namespaces(self) -> None:
        """Pod sandboxes' network namespaces that containerd had no chance to remove (``cni-*``, each
        holding an address of this node's pod subnet)."""
        subnet = ipaddress.ip_network(self.subnet)
        for name in run("ip", "netns", "list").stdout.split():
            if not name.startswith("cni-"):
                continue
            shown = run("ip", "-n", name, "-4", "-o", "addr", "show", check=False).stdout.split()
            addresses = [w.split("/")[0] for w, prev in zip(shown[1:], shown, strict=False) if prev == "inet"]
            if any(ipaddress.ip_address(a) in subnet for a in addresses):
                run("ip", "netns", "del", name, check=False)

    def _unmount(self) -> None:
        prefix = str(self.root) + "/"
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for target in sorted((m for m in mounts if m.startswith(prefix) or m == str(self.root)), reverse=True):
            run("umount", "-l", target, check=False)

    def _remove_cgroups(self) -> None:
        for hierarchy in CGROUP_ROOT.iterdir():
            base = hierarchy / self.cgroup
            if not base.is_dir():
                continue
            for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                base.rmdir()


# -- the lab ----------------------------------------------------------------------------------

@dataclass
class RealNodeLab:
    """``count`` real nodes for ``host``: the first labelled control-plane (tenant control planes
    land there, as kubenest places them), the others workers available for promotion."""

    host: HostCluster
    root: Path
    count: int = 2
    prefix: str = "real"

    def nodes(self) -> list[RealNode]:
        return [RealNode(f"{self.prefix}-control-plane" if i == 1 else f"{self.prefix}-worker-{i - 1}", i,
                         self.root / f"node-{i}", control_plane=i == 1) for i in range(1, self.count + 1)]

    def node(self, name: str) -> RealNode:
        return next(n for n in self.nodes() if n.name == name)

    def up(self, images: list[Path] | None = None, pause_image: str | None = None, timeout: float = 120.0,
           say: Callable[[str], None] = lambda _: None) -> list[RealNode]:
        """Start what is not running (images built or taken from the cache first); idempotent."""
        if images is None or pause_image is None:
            images, pause_image = node_images(say)
        ensure_network()
        nodes = self.nodes()
        for node in nodes:
            started = time.monotonic()
            node.start(self.host, images, pause_image)
            self.wait_ready(node.name, timeout)
            if node.control_plane:
                self.host.kubectl("label", "node", node.name, f"{CONTROL_PLANE_ROLE}=", "--overwrite")
            say(f"real node       {node.name} Ready at {node.address} in {time.monotonic() - started:.1f}s "
                f"(kubelet + containerd, pods {node.subnet})")
        self.host_services(nodes)
        # The host's control plane reaches Services as a kubeadm control-plane machine does through its own
        # kube-proxy: here, through the control-plane node's (the aggregator dials an in-cluster APIService's
        # Service). The route goes with the bridge.
        run("ip", "route", "replace", SERVICE_CIDR, "via", nodes[0].address)
        say(f"host add-ons    kube-proxy and CoreDNS on the real nodes, local volumes on demand ({STORAGE_CLASS}, "
            f"local-path-provisioner); Services {SERVICE_CIDR} via {nodes[0].name}")
        return nodes

    def host_services(self, nodes: list[RealNode]) -> None:
        """What a real host has and the playground host lacks: kube-proxy and CoreDNS (the tenants'
        add-ons, kept off kwok nodes), and storage provisioned on demand (:mod:`hack.labstorage`). What an
        older lab left of its storage goes first: a StorageClass of another provisioner, and the statically
        made volumes no claim holds."""
        affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]}]}}
        self.remove_stale_storage()
        objs = addons.only_on([*addons.kube_proxy(self.host.url_for_nodes, POD_NETWORK), *addons.coredns(SERVICE_CIDR)], affinity)
        for node in nodes:
            (node.root / "volumes").mkdir(parents=True, exist_ok=True)
        objs += labstorage.objects(STORAGE_CLASS, {n.name: n.root / "volumes" for n in nodes}, affinity)
        self.host.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=realnodes", "-f", "-",
                          input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))

    def remove_stale_storage(self) -> None:
        found = self.host.kubectl("get", "storageclass", STORAGE_CLASS, "-o", "json", check=False)
        if found.returncode == 0 and json.loads(found.stdout).get("provisioner") != labstorage.PROVISIONER:
            self.host.kubectl("delete", "storageclass", STORAGE_CLASS, "--wait=true")
        for pv in json.loads(self.host.kubectl("get", "pv", "-o", "json").stdout)["items"]:
            if (pv["metadata"].get("labels") or {}).get(REAL_NODE_LABEL) == "true" and \
                    pv.get("status", {}).get("phase") in ("Available", "Released", "Failed"):
                self.host.kubectl("delete", "pv", pv["metadata"]["name"], "--wait=false")
                path = (pv["spec"].get("local") or {}).get("path")
                if path and Path(path).is_relative_to(self.root):
                    shutil.rmtree(path, ignore_errors=True)

    def existing(self) -> list[RealNode]:
        """Every node with state under ``root``, whatever ``count`` says now (for teardown)."""
        out = []
        for spec_file in sorted(self.root.glob("node-*/node.json")):
            with contextlib.suppress(ValueError, KeyError, OSError):
                spec = json.loads(spec_file.read_text())
                out.append(RealNode(spec["name"], spec["index"], spec_file.parent, spec["controlPlane"]))
        return out

    def wait_ready(self, name: str, timeout: float = 120.0) -> None:
        """Ready, and its not-ready taint lifted by the host's node lifecycle controller (a few seconds
        later): until then only pods that tolerate it land there."""
        def ready() -> bool:
            out = self.host.kubectl("get", "node", name, "-o", "json", check=False)
            if out.returncode != 0:
                return False
            node = json.loads(out.stdout)
            conditions = node["status"].get("conditions", [])
            tainted = any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
            return not tainted and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        wait_until(ready, timeout, f"node {name} Ready (and untainted) in the host", interval=0.5)

    def down(self) -> None:
        if self.host.ready():
            self.host.kubectl("delete", "pv", "-l", f"{REAL_NODE_LABEL}=true", "--wait=false", check=False)
        for node in self.existing():
            node.destroy()
            if self.host.ready():
                self.host.kubectl("delete", "node", node.name, "--ignore-not-found", "--wait=false", check=False)
        destroy_network()


def node_images(say: Callable[[str], None] = lambda _: None) -> tuple[list[Path], str]:
    """Every image a node runs (built locally by hack/images, cached), and the pause image's name."""
    from hack.images import build
    built = build.build_all(say=lambda line: None)
    say(f"images          {len(built)} built locally or cached (python -m hack.images list)")
    return [b.path for b in built], PAUSE_IMAGE


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.realnodes")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("restart-kubelet", help="restart a real node's kubelet on its current files")
    r.add_argument("--node-dir", type=Path, required=True)
    args = p.parse_args(argv)
    spec = json.loads((args.node_dir / "node.json").read_text())
    node = RealNode(spec["name"], spec["index"], args.node_dir, spec["controlPlane"])
    node.restart_kubelet()
    print(f"kubelet of {node.name} restarted (pid {node.proc('kubelet').pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
