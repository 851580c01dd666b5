"""The control-plane runtime contract: one interface, chosen by ``--control-plane-runtime``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import ClassVar, Protocol

from apiserver.machinery.jsonutil import Obj
from certs.tenant import TenantPki
from reconciler.backup.etcd import BackupFailure
from reconciler.backup.snapshots import Snapshot
from reconciler.tenantapi import TenantClients

# The reconciler's name wherever it writes: the field manager of the host objects it applies and of
# its own status writes to VirtualClusters (recorded in their managedFields). Those status writes go
# straight to the registry, with no User-Agent for kube's rule to name them by, so the name is the
# server's own, as a kube controller is named after its binary.
FIELD_MANAGER = "vc-apiserver"
# The tenant binaries, by the names the process runtime starts and the pods runtime's images carry.
ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER = "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"
BINARIES = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)


@dataclass(frozen=True)
class ControlPlaneState:
    """What a runtime can say about one tenant control plane right now."""

    ready: bool
    reason: str
    message: str
    endpoint: str = ""  # https://host:port of the tenant apiserver, once known
    port: int = 0
    # Every component runs; only the apiserver's readiness check went unanswered. Under load that
    # can be one slow answer rather than an outage, so a ready control plane is not declared
    # unready on one such miss (kube's probes have a failureThreshold for the same reason).
    unanswered: bool = False


@dataclass(frozen=True)
class UpgradeOutcome:
    """How an upgrade of a running control plane went: every component on the new version, or the first
    that did not come up (``served``: the new apiserver had answered ready, so the data may hold its writes)."""

    ok: bool
    component: str = ""
    message: str = ""
    served: bool = False


class RuntimeFailure(Exception):
    """A failure the runtime explains (reported as a condition; the reconcile is retried)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, e: BackupFailure) -> RuntimeFailure:
        return cls(e.reason, e.message)


class ControlPlaneRuntime(Protocol):
    """One tenant control plane's life: ``ensure`` builds, repairs and wakes it, ``hibernate`` stops
    it with its data kept, ``teardown`` removes it."""

    name: str
    # Each tenant apiserver's admin client, kept between passes (readiness, promotion); the runtime
    # forgets a tenant's when it hibernates or tears it down.
    clients: TenantClients
    # Seconds a hibernated control plane usually takes to answer again (measured: docs/benchmarks.md),
    # told to whoever wakes one.
    WAKE_ESTIMATE: ClassVar[int]
    # Its apiserver is replaced by stopping the old one before the new one starts, so two never serve at
    # once (a rotation then needs no step for both to trust a new key before one signs with it).
    REPLACES_IN_PLACE: ClassVar[bool]

    def endpoint_host(self, vc: Obj) -> str:
        """The host the tenant apiserver is reached at (a SAN of its certificate)."""

    async def pod_addresses(self, vc: Obj) -> list[tuple[str, int]]:
        """Where a pod in the host reaches the tenant apiserver with no proxy in between (a slice's pods, through
        the host Service of the tenant's ``kubernetes``): ready apiserver pods, or a process's routable address;
        none when it is only on loopback."""

    async def ensure(self, vc: Obj, pki: TenantPki, version: str = "") -> ControlPlaneState:
        """Create, adopt or repair the control plane, its Kubernetes components at ``version`` (''; the
        newest this server was built with); idempotent; never waits for readiness. A hibernated control
        plane is woken by it: started again from the data it kept."""

    async def upgrade(self, vc: Obj, pki: TenantPki, version: str, timeout: float) -> UpgradeOutcome:
        """Move a running control plane's components to ``version`` in kube's order, the apiserver first and
        without a moment with none answering, each given ``timeout`` seconds to come up; idempotent (a
        component already there is left alone). Raises RuntimeFailure when it cannot start."""

    async def roll_back(self, vc: Obj, pki: TenantPki, snapshot: str | None) -> bool:
        """After a failed :meth:`upgrade`: stop what it started, and with ``snapshot`` (one of this tenant's)
        put the etcd data back as it was then; the next :meth:`ensure` at the old version starts the rest.
        Whether the data was put back (False without ``snapshot``, or where this runtime cannot)."""

    async def rolled_out(self, vc: Obj, pki: TenantPki) -> bool:
        """Whether every component runs from ``pki`` as it is now, none from what it was before (a rotated
        key is only read at start): the next step of a rotation waits for this."""

    async def hibernate(self, vc: Obj) -> bool:
        """Stop every component of the control plane, keeping its data and whatever ``ensure`` needs to
        start it again as it was (same endpoint, same objects); idempotent. True once nothing of it runs."""

    async def snapshots(self, vc: Obj) -> list[Snapshot]:
        """The tenant's recorded snapshots, oldest first, as last verified (where this runtime keeps
        them: :mod:`reconciler.backup`). Raises RuntimeFailure."""

    async def take_snapshot(self, vc: Obj, snapshot: str, moment: dt.datetime,
                            keep: int) -> tuple[Snapshot, list[Snapshot]]:
        """Take a consistent snapshot of the tenant's etcd with etcd's snapshot API, verify it, record it
        as ``snapshot`` taken at ``moment`` and keep the newest ``keep``. Returns it (with its problem,
        and removed, when it failed verification) and the snapshots kept. What a snapshot cut short left
        is swept first. Raises RuntimeFailure."""

    async def prune_snapshots(self, vc: Obj, keep: int) -> list[Snapshot]:
        """Keep the newest ``keep`` good snapshots, each verified again; returns those kept."""

    async def restore(self, vc: Obj, origin: str, snapshot: str, label: str) -> bool:
        """Before the control plane first starts, make its etcd data snapshot ``snapshot`` of
        VirtualCluster ``origin`` in the same namespace (``label`` names it in messages), with etcd's own
        restore, whole or not at all; idempotent: False when its data already exists (restored before,
        or started). Raises RuntimeFailure (reason :data:`reconciler.backup.etcd.RESTORE_FAILED`) for a snapshot that is
        missing, fails verification or cannot be restored."""

    async def last_request(self, vc: Obj, since: dt.datetime) -> dt.datetime | None:
        """When the tenant apiserver last served a request from a user (:mod:`.audit` says who does
        not count), if it did at or after ``since``. Raises RuntimeFailure when it cannot tell."""

    async def teardown(self, namespace: str, name: str) -> None:
        """Remove everything the control plane owns; idempotent."""

    async def release(self) -> None:
        """Forget what is kept from one pass to the next (connections, what was last applied): this
        server stopped leading, and another may change the tenants meanwhile."""

    async def owned(self) -> list[tuple[str, str]]:
        """(namespace, name) of every control plane this runtime currently has (for orphan cleanup)."""

    def usage(self, namespace: str, name: str) -> tuple[float, int] | None:
        """The control plane's cpu seconds used so far and resident memory in bytes, summed over its
        components; None where this runtime cannot measure them (metering reads it at each scrape, so
        it must be quick and do no I/O beyond the local machine)."""
