"""The embedded reconcile loop's own flags, grouped as the server's are (``apiserver/server/options.py``):
each group a small dataclass with ``add_flags``, ``validate`` and ``to_config``. :class:`ReconcilerOptions`
assembles them into a frozen :class:`ReconcilerConfig`, which builds the control-plane runtime and the
node joiner it asks for once the server has made what they need (the host client, the secret store).

``apiserver/__main__.py`` adds these flags beside the server's and wires the loop in; what depends on
both (a runtime needs the server's encryption key) is checked there."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from apiserver import IMAGE
from apiserver.apis.kubeversion import Offered
from apiserver.machinery.optiongroups import OptionSet
from apiserver.machinery.validation import dns1123_label_errors
from reconciler import versions
from reconciler.shared.placement import Placement, PlacementError
from reconciler.shared.ranges import DEFAULT_POOL, DEFAULT_PREFIX, Pool

if TYPE_CHECKING:
    from apiserver.kubeclient.client import KubeClient
    from apiserver.storage.secrets import SecretStore
    from reconciler.nodes.promoter import NodeJoiner
    from reconciler.runtime.authz import TenantAuthorizationWebhook
    from reconciler.runtime.base import ControlPlaneRuntime

__all__ = ["JoinerConfig", "LoopOptions", "NodeJoinerOptions", "ReconcilerConfig", "ReconcilerOptions",
           "RuntimeConfig", "RuntimeOptions", "SliceConfig", "SliceOptions", "SnapshotConfig", "SnapshotOptions",
           "ephemeral_port_range"]

log = logging.getLogger("vc-apiserver")



# -- the groups -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoopOptions:
    """Whether the loop runs in this replica, and how: leader election, and workers."""

    TITLE: ClassVar[str] = "Reconciler flags"

    enable_reconciler: str
    leader_elect_lease_duration: int
    identity: str
    concurrent_reconciles: int

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--enable-reconciler", default="true", choices=["true", "false"],
                       help="run the embedded reconcile loop (with leader election)")
        p.add_argument("--leader-elect-lease-duration", type=int, default=15, help="seconds")
        p.add_argument("--identity", default="", help="this replica's name for leader election (default: host:pid)")
        p.add_argument("--concurrent-reconciles", type=int, default=4, help="VirtualClusters reconciled at once")

    @property
    def enabled(self) -> bool:
        return self.enable_reconciler == "true"

    def validate(self) -> list[str]:
        return []


@dataclass(frozen=True)
class RuntimeConfig:
    kind: str  # none, process or pods
    runtime_dir: str
    bin_dir: str
    port_range: str  # read when the process runtime is made, as its flag says: "low-high"
    tuning: str
    gogc: int | None
    authorization_url: str = ""  # where tenant apiservers reach this server; "": its loopback (process runtime)
    authorization_ca_file: str = ""  # what verifies it there; "": the serving certificate
    rotation_overlap: float = 3600.0  # seconds a rotated-out service-account key still verifies
    kubernetes_versions: tuple[str, ...] = (versions.KUBERNETES_VERSION,)  # what tenants may run, newest first
    upgrade_timeout: float = 120.0  # seconds each component has to come up at a new version before a rollback


@dataclass(frozen=True)
class RuntimeOptions:
    """How tenant control planes run, and how their components are tuned."""

    TITLE: ClassVar[str] = "Control-plane runtime flags"

    control_plane_runtime: str
    runtime_dir: str
    tenant_tuning: str
    tenant_gogc: int | None
    runtime_bin_dir: str
    tenant_port_range: str
    tenant_authorization_url: str
    tenant_authorization_ca_file: str
    service_account_key_rotation_overlap: int
    kubernetes_versions: str
    upgrade_timeout: int

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--control-plane-runtime", default="none", choices=["none", "process", "pods"],
                       help="how tenant control planes run: process = local processes (playground, tests); "
                            "pods = workloads in the host cluster (production)")
        p.add_argument("--runtime-dir", default=".local/tenants", help="process runtime: tenant data directories")
        p.add_argument("--tenant-tuning", choices=("lean", "stock"), default="lean",
                       help="how the tenant components run: lean (GOGC=50, the apiserver's watch cache and storage "
                            "metric polls off, GOMAXPROCS 1 but for the apiserver's 2, and in the process runtime a "
                            "timer slack of 50 ms, 20 for the apiserver: less memory and idle CPU per tenant, the "
                            "same API) or stock (kube's and Go's defaults)")
        p.add_argument("--tenant-gogc", type=int, default=None,
                       help="GOGC of the tenant components, over the tuning's: how far a heap grows past what is "
                            "live before Go collects (lower: less memory per tenant, more CPU under load; Go's "
                            "default is 100)")
        p.add_argument("--runtime-bin-dir", default=".local/bin",
                       help="process runtime: where etcd, kube-apiserver, kube-controller-manager, kube-scheduler "
                            "are")
        p.add_argument("--tenant-port-range", default="20000-29999",
                       help="process runtime: ports for tenant components; keep it outside the kernel's ephemeral "
                            "range (net.ipv4.ip_local_port_range), where any outgoing connection may take a port "
                            "between its allocation and its component's start")
        p.add_argument("--tenant-authorization-url", default="",
                       help="https://host:port at which tenant apiservers reach this server's credential webhook "
                            "(revocation of issued credentials); default: this server's loopback address, which "
                            "serves the process runtime; the pods runtime needs the address of this server's "
                            "Service (without one, issued credentials cannot be revoked)")
        p.add_argument("--tenant-authorization-ca-file", default="",
                       help="PEM that verifies this server's certificate at --tenant-authorization-url (default: "
                            "--tls-cert-file itself)")
        p.add_argument("--service-account-key-rotation-overlap", type=int, default=3600,
                       help="seconds a tenant's old service-account key still verifies after the new one signs, "
                            "before a rotation asked to complete drops it: kubelets refresh the tokens they hold at "
                            "80%% of their hour, so by then no pod presents one of the old key")
        p.add_argument("--kubernetes-versions", default=versions.VERSIONS["KUBERNETES_VERSIONS"],
                       help="comma-separated Kubernetes versions tenants may run (spec.kubernetesVersion); the newest "
                            "is the default. The process runtime starts version V from <--runtime-bin-dir>/"
                            "kubernetes-V, the pods runtime from registry.k8s.io's images tagged V")
        p.add_argument("--upgrade-timeout", type=int, default=120,
                       help="seconds each tenant component is given to come up at a new Kubernetes version before "
                            "the upgrade rolls back by itself")

    def validate(self) -> list[str]:
        problems = []
        if self.service_account_key_rotation_overlap < 0:
            problems.append("--service-account-key-rotation-overlap must be 0 or more seconds")
        if self.upgrade_timeout < 1:
            problems.append("--upgrade-timeout must be 1 second or more")
        try:
            Offered.of(self.versions())
        except ValueError as e:
            problems.append(f"--kubernetes-versions: {e}")
        return problems

    def versions(self) -> tuple[str, ...]:
        """``--kubernetes-versions``, newest first."""
        values = [v.strip() for v in self.kubernetes_versions.split(",") if v.strip()]
        try:
            return tuple(str(v) for v in Offered.of(values).versions)
        except ValueError:
            return tuple(values)

    def to_config(self) -> RuntimeConfig:
        return RuntimeConfig(kind=self.control_plane_runtime, runtime_dir=self.runtime_dir,
                             bin_dir=self.runtime_bin_dir, port_range=self.tenant_port_range,
                             tuning=self.tenant_tuning, gogc=self.tenant_gogc,
                             authorization_url=self.tenant_authorization_url,
                             authorization_ca_file=self.tenant_authorization_ca_file,
                             rotation_overlap=float(self.service_account_key_rotation_overlap),
                             kubernetes_versions=self.versions(), upgrade_timeout=float(self.upgrade_timeout))

    def wake_estimate(self) -> int:
        """Seconds a hibernated control plane of this runtime usually takes to be ready again (what the
        kubeconfig subresource tells whoever wakes one); any replica answers it, reconciling or not."""
        if self.control_plane_runtime == "pods":
            from reconciler.runtime.pods import PodsRuntime

            return PodsRuntime.WAKE_ESTIMATE
        from reconciler.runtime.process import ProcessRuntime

        return ProcessRuntime.WAKE_ESTIMATE


@dataclass(frozen=True)
class SnapshotConfig:
    directory: str | None  # process runtime; None: beside the runtime's directory
    volume_size: str
    storage_class: str | None  # pods runtime; None: the host's default class
    backup_image: str


@dataclass(frozen=True)
class SnapshotOptions:
    """Where snapshots of tenant etcds (``spec.backup``, ``restoreFrom``) are kept, and what takes them."""

    TITLE: ClassVar[str] = "Snapshot flags"

    snapshot_dir: str
    snapshot_volume_size: str
    snapshot_storage_class: str
    backup_image: str

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--snapshot-dir", default="",
                       help="process runtime: where snapshots of tenant etcds (spec.backup) are kept; default: a "
                            "directory snapshots beside --runtime-dir")
        p.add_argument("--snapshot-volume-size", default="10Gi",
                       help="pods runtime: the size of the PersistentVolumeClaim virtualcluster-snapshots that each "
                            "namespace with VirtualClusters gets for their snapshots (spec.backup, restoreFrom)")
        p.add_argument("--snapshot-storage-class", default="",
                       help="pods runtime: that claim's StorageClass; default: the host's default class")
        p.add_argument("--backup-image", default=IMAGE,
                       help="pods runtime: the image of the pods that take and restore snapshots beside a tenant's "
                            "etcd (vc-apiserver's own, which carries etcdutl)")

    def validate(self) -> list[str]:
        return []

    def to_config(self) -> SnapshotConfig:
        return SnapshotConfig(directory=self.snapshot_dir or None, volume_size=self.snapshot_volume_size,
                              storage_class=self.snapshot_storage_class or None, backup_image=self.backup_image)


AGENT_FILES_MISSING = ("--node-joiner=agent needs --node-agent-ca-file, --node-agent-client-cert-file and "
                       "--node-agent-client-key-file")
AGENT_WITHOUT_HOST = "--node-joiner=agent needs a host cluster and a control-plane runtime"


@dataclass(frozen=True)
class JoinerConfig:
    kind: str  # kwok or agent
    agent_port: int
    agent_ca_file: str | None
    agent_client_cert_file: str | None
    agent_client_key_file: str | None


@dataclass(frozen=True)
class NodeJoinerOptions:
    """How promoted nodes join a tenant, and how the agent joiner reaches the node agents."""

    TITLE: ClassVar[str] = "Node joiner flags"

    node_joiner: str
    node_agent_port: int
    node_agent_ca_file: str | None
    node_agent_client_cert_file: str | None
    node_agent_client_key_file: str | None

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--node-joiner", default="kwok", choices=["kwok", "agent"],
                       help="how promoted nodes join a tenant: kwok = simulated nodes beside the process runtime "
                            "(playground, tests); agent = each host node's kubelet, re-pointed by the node agent "
                            "(apiservice/deploy/agent)")
        p.add_argument("--node-agent-port", type=int, default=10350, help="agent joiner: the node agents' port")
        p.add_argument("--node-agent-ca-file", help="agent joiner: CA of the node agents' serving certificates")
        p.add_argument("--node-agent-client-cert-file",
                       help="agent joiner: client certificate for the node agents (CN kosmos:node-agent-client)")
        p.add_argument("--node-agent-client-key-file", help="agent joiner: its key")

    def validate(self) -> list[str]:
        files = (self.node_agent_ca_file, self.node_agent_client_cert_file, self.node_agent_client_key_file)
        return [AGENT_FILES_MISSING] if self.node_joiner == "agent" and not all(files) else []

    def to_config(self) -> JoinerConfig:
        return JoinerConfig(kind=self.node_joiner, agent_port=self.node_agent_port,
                            agent_ca_file=self.node_agent_ca_file or None,
                            agent_client_cert_file=self.node_agent_client_cert_file or None,
                            agent_client_key_file=self.node_agent_client_key_file or None)


def _namespaced(text: str) -> tuple[str, str] | None:
    namespace, _, name = text.partition("/")
    return (namespace, name) if text else None


@dataclass(frozen=True)
class SliceConfig:
    """Where shared slices run and how much of the host they may promise."""

    overcommit: float = 1.0
    placement: Placement = field(default_factory=Placement)
    service_ranges: Pool = field(default_factory=Pool)
    kubelet_port: int = 0  # the shared nodes' kubelet API (0: not served)
    kubelet_address: str = ""  # where tenant apiservers reach it
    kubelet_service: tuple[str, str] | None = None  # the host NodePort Service it is published as (ns, name)
    tls: tuple[str, str] | None = None  # its serving certificate and key (the server's own)
    storage_classes: tuple[str, ...] = ()  # the host StorageClasses slices' claims may use


@dataclass(frozen=True)
class SliceOptions:
    """The host's slice node pool, and how much of it shared slices may promise."""

    TITLE: ClassVar[str] = "Shared slice flags"

    slice_overcommit: float
    slice_node_selector: str
    slice_tolerations: str
    slice_service_cidrs: str
    slice_service_cidr_prefix: int
    slice_kubelet_port: int
    slice_kubelet_address: str
    slice_kubelet_service: str
    slice_storage_classes: str

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--slice-overcommit", type=float, default=1.0,
                       help="how many times the cpu and memory of the host's slice pool the shared slices may "
                            "promise together; 1 promises no more than the pool has: a slice that does not fit "
                            "waits, Pending")
        p.add_argument("--slice-node-selector", default="",
                       help="label selector of the host nodes every shared slice's pods run on (the slice node "
                            "pool; default: any Ready, schedulable node), e.g. node-role.kosmos.io/slices=true")
        p.add_argument("--slice-tolerations", default="",
                       help="taints of the slice node pool that slices' pods tolerate: key[=value]:Effect, "
                            "comma-separated")
        p.add_argument("--slice-service-cidrs", default=DEFAULT_POOL,
                       help="the pool each tenant made with a shared slice gets its Services range from, which the "
                            "host serves as a ServiceCIDR so that its proxies carry the tenant's Services; must "
                            "overlap no range of the host, and should sort after the host's own")
        p.add_argument("--slice-service-cidr-prefix", type=int, default=DEFAULT_PREFIX,
                       help="the size of each tenant's range in the pool, as a prefix length (22: 1,022 Services)")
        p.add_argument("--slice-kubelet-port", type=int, default=0,
                       help="the port of the shared nodes' kubelet API, which tenant apiservers use for logs, exec, "
                            "attach and port-forward of slice pods (0: not served)")
        p.add_argument("--slice-kubelet-address", default="",
                       help="the address tenant apiservers reach that port at (this server's pod IP in a cluster); "
                            "default: 127.0.0.1, where the process runtime's tenant apiservers run")
        p.add_argument("--slice-kubelet-service", default="",
                       help="NAMESPACE/NAME of a host Service of type NodePort that the leader makes and points at "
                            "that API; the shared nodes then report a slice-pool node's address, where the "
                            "tenant's NodePort Services answer too, with the Service's node port as their kubelet "
                            "port (default: none; they report --slice-kubelet-address, where NodePorts do not "
                            "answer)")
        p.add_argument("--slice-storage-classes", default="",
                       help="the host StorageClasses offered to shared slices, comma-separated: each appears in "
                            "the tenant, and a tenant claim of one is served by a host claim in the slice's "
                            "namespace (default: none; a pod with a claim is refused)")

    def validate(self) -> list[str]:
        problems = [] if self.slice_overcommit > 0 else [
            f"--slice-overcommit must be positive, got {self.slice_overcommit:g}"]
        try:
            Placement.from_flags(self.slice_node_selector, self.slice_tolerations)
        except PlacementError as e:
            problems.append(str(e))
        try:
            Pool(self.slice_service_cidrs, self.slice_service_cidr_prefix)
        except ValueError as e:
            problems.append(f"--slice-service-cidrs/--slice-service-cidr-prefix: {e}")
        if not 0 <= self.slice_kubelet_port <= 65535:
            problems.append(f"--slice-kubelet-port must be a port (0 to 65535), got {self.slice_kubelet_port}")
        if self.slice_kubelet_service:
            namespace, name = _namespaced(self.slice_kubelet_service) or ("", "")
            if not namespace or not name or dns1123_label_errors(namespace) or dns1123_label_errors(name):
                problems.append(f"--slice-kubelet-service must be NAMESPACE/NAME, got {self.slice_kubelet_service!r}")
            if not self.slice_kubelet_port or not self.slice_kubelet_address:
                problems.append("--slice-kubelet-service needs --slice-kubelet-port and --slice-kubelet-address "
                                "(the Service's endpoint)")
        return problems

    def to_config(self) -> SliceConfig:
        return SliceConfig(self.slice_overcommit, Placement.from_flags(self.slice_node_selector,
                                                                       self.slice_tolerations),
                           Pool(self.slice_service_cidrs, self.slice_service_cidr_prefix),
                           self.slice_kubelet_port, self.slice_kubelet_address or "127.0.0.1",
                           _namespaced(self.slice_kubelet_service),
                           storage_classes=tuple(c.strip() for c in self.slice_storage_classes.split(",") if c.strip()))


# -- the whole ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReconcilerConfig:
    """What the loop runs with, from its flags; :meth:`new_runtime` and :meth:`new_joiner` build the parts
    that need what only the built server has."""

    lease_duration: int
    identity: str  # "": host:pid
    workers: int
    runtime: RuntimeConfig
    snapshots: SnapshotConfig
    joiner: JoinerConfig
    slices: SliceConfig = field(default_factory=SliceConfig)

    def tenant_webhook(self, bind_address: str, secure_port: int, cert_file: str) -> TenantAuthorizationWebhook | None:
        """Where tenant apiservers reach this server's credential webhook (this server serving HTTPS at
        ``bind_address:secure_port`` with ``cert_file``); None when they cannot (pods runtime, no URL given)."""
        from reconciler.runtime.authz import TenantAuthorizationWebhook

        runtime = self.runtime
        ca = Path(runtime.authorization_ca_file or cert_file).read_bytes()
        if runtime.authorization_url:
            return TenantAuthorizationWebhook(runtime.authorization_url, ca)
        if runtime.kind != "process":
            log.warning("--tenant-authorization-url is not set: tenant pods cannot reach this server's credential "
                        "webhook, and credentials issued for their clusters cannot be revoked")
            return None
        host = bind_address if bind_address not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return TenantAuthorizationWebhook(f"https://{host}:{secure_port}", ca)

    def new_runtime(self, host: KubeClient | None = None,
                    webhook: TenantAuthorizationWebhook | None = None) -> ControlPlaneRuntime | None:
        """The control-plane runtime the flags ask for; None for ``--control-plane-runtime=none``."""
        from reconciler.runtime.process import ProcessRuntime
        from reconciler.runtime.tuning import PROFILES

        runtime, snapshots = self.runtime, self.snapshots
        if runtime.kind == "none":
            return None
        tuning = PROFILES[runtime.tuning].with_gogc(runtime.gogc)
        if runtime.kind == "pods":
            from reconciler.runtime.pods import PodsRuntime

            if host is None:
                raise SystemExit("--control-plane-runtime=pods needs a host cluster: --host-kubeconfig, "
                                 "--authentication-kubeconfig or in-cluster config")
            return PodsRuntime(host, backup_image=snapshots.backup_image, snapshot_volume_size=snapshots.volume_size,
                               snapshot_storage_class=snapshots.storage_class, tuning=tuning, webhook=webhook)
        low, _, high = runtime.port_range.partition("-")
        ports = (int(low), int(high))
        ephemeral = ephemeral_port_range()
        if ephemeral and ports[0] <= ephemeral[1] and ephemeral[0] <= ports[1]:
            log.warning("--tenant-port-range %s overlaps the kernel's ephemeral ports %d-%d: an outgoing connection "
                        "can take a tenant component's port before it starts", runtime.port_range, *ephemeral)
        directory = Path(snapshots.directory).resolve() if snapshots.directory else None
        return ProcessRuntime(Path(runtime.runtime_dir).resolve(), Path(runtime.bin_dir).resolve(), ports, directory,
                              tuning=tuning, webhook=webhook)

    def new_joiner(self, host: KubeClient | None, secrets: SecretStore | None) -> NodeJoiner | None:
        """The agent joiner when asked for; None leaves the default (kwok beside the process runtime)."""
        joiner = self.joiner
        if joiner.kind != "agent":
            return None
        from reconciler.nodes.agentjoiner import AgentAccess, AgentJoiner

        if joiner.agent_ca_file is None or joiner.agent_client_cert_file is None or joiner.agent_client_key_file is None:
            raise SystemExit(AGENT_FILES_MISSING)
        if host is None or secrets is None:
            raise SystemExit(AGENT_WITHOUT_HOST)
        return AgentJoiner(host, secrets, AgentAccess.from_files(
            joiner.agent_ca_file, joiner.agent_client_cert_file, joiner.agent_client_key_file, port=joiner.agent_port))


@dataclass(frozen=True)
class ReconcilerOptions(OptionSet):
    """The loop's option groups, in the order ``--help`` lists them."""

    GROUPS: ClassVar[dict[str, Any]] = {
        "loop": LoopOptions, "runtime": RuntimeOptions, "snapshots": SnapshotOptions, "joiner": NodeJoinerOptions,
        "slices": SliceOptions,
    }

    loop: LoopOptions
    runtime: RuntimeOptions
    snapshots: SnapshotOptions
    joiner: NodeJoinerOptions
    slices: SliceOptions

    @property
    def enabled(self) -> bool:
        return self.loop.enabled

    def validate(self) -> list[str]:
        """The groups' errors; none when the loop does not run here (its flags are then not read)."""
        return super().validate() if self.enabled else []

    def wake_estimate(self) -> int:
        return self.runtime.wake_estimate()

    def kubernetes_versions(self) -> tuple[str, ...]:
        return self.runtime.versions()

    def config(self) -> ReconcilerConfig | None:
        """The loop's config; None when ``--enable-reconciler=false``."""
        if not self.enabled:
            return None
        return ReconcilerConfig(lease_duration=self.loop.leader_elect_lease_duration, identity=self.loop.identity,
                                workers=self.loop.concurrent_reconciles, runtime=self.runtime.to_config(),
                                snapshots=self.snapshots.to_config(), joiner=self.joiner.to_config(),
                                slices=self.slices.to_config())


def ephemeral_port_range() -> tuple[int, int] | None:
    """The ports the kernel hands to outgoing connections (Linux), if it says."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None
