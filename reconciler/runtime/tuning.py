"""How lean the tenant components run: the flags and environment that cut what an idle tenant costs
without changing what its API does. One profile for both runtimes (the pods runtime leaves out the
timer slack: only the process runtime starts processes itself); ``--tenant-tuning`` picks it.

Measured on 2 cores with one settled tenant (process runtime, no nodes; bench/density.py for N):
- the apiserver's watch cache off: its idle CPU 1.1-1.2 -> 0.5-0.6 % of a core, 7 MiB less. Every
  built-in resource's cache dispatches bookmarks on its own 1 s timer whether anyone watches or not;
  without it a LIST or watch is served by the tenant's etcd, which holds a small tenant's objects in
  memory anyway. What a client sees is the same: consistent reads, watches from any revision etcd
  still holds.
- the apiserver's storage metric polls off (object counts per resource every minute, the database
  size every 30 s): etcd 0.50 -> 0.38 %, the apiserver 0.63 -> 0.45 %. Only metrics lose them.
- GOMAXPROCS=1 for etcd, the controller-manager and the scheduler: 1.92 -> 1.50 % per tenant (three
  tenants each way), memory unchanged (likely: with more than one P, a timer firing in an idle
  process can wake a second thread to look for work). These three do little at once; the
  apiserver keeps up to 2 cores for request bursts.
- GOGC=50: the heap may grow by half the live heap, not all of it, before Go collects: 24-46 MiB less
  per tenant (kube-apiserver's heap, mostly), no measurable idle CPU; 25 takes 70 MiB at four times
  the collections under load; a GOMEMLIMIT below the apiserver's live heap (100 MiB) makes it
  collect without end (65-128 % of a core, idle).
- a timer slack (process runtime; :mod:`.timerslack`) of 50 ms for etcd, the controller-manager and the
  scheduler, 20 ms for the apiserver: the kernel may end their timed sleeps that much late, with the
  other timers already due, so an idle tenant wakes less. Packets still wake their reader at once.
  Five tenants created one after another, 30 s windows (bench.density, two runs each way): none 2.95 /
  2.88, 10 ms 1.81 / 2.02 % of a core per tenant. 30 tenants (bench.density): 10 ms 1.18, 20 ms 1.11,
  this split 0.92 and 0.88 % (two runs).
  One settled tenant, three runs each, alternated: 20 ms everywhere 1.16 / 0.96 / 1.16 %, ready in
  2.90 / 3.15 / 2.89 s; 50 ms everywhere 0.80 / 0.80 / 0.88 %, but ready in 3.29 / 3.31 / 3.56 s (the
  apiserver's slack delays its start); this split 0.96 / 0.96 / 1.00 %, ready in 3.22 / 2.97 / 2.60 s.
  Under 1,500 ConfigMap creates (16 at once) and 30 lists, three runs each, 50 against 20 ms: creates'
  p99 56.8 / 62.7 / 78.9 against 76.1 / 71.1 / 55.8 ms, the load 2.68-2.97 s against 2.83-3.17 s.
  What is left wakes on timers no flag reaches (Go execution traces of a settled tenant, 20 s): every
  work queue ticks twice a second for its metrics (the controller-manager: 115 of its 155 goroutine
  wakes a second; the apiserver: 60 of 197), and the apiserver merges the OpenAPI specs of its own API
  groups again every second (94 of 197).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from reconciler.runtime.base import APISERVER, CONTROLLER_MANAGER, ETCD, SCHEDULER


@dataclass(frozen=True)
class TenantTuning:
    """One tuning profile of the tenant components."""

    name: str
    gogc: int  # Go's GC target (GOGC): how far a heap grows past what is live before Go collects
    watch_cache: bool  # the tenant apiserver's watch cache (--watch-cache)
    storage_metric_polls: bool  # the apiserver's polls of etcd for object counts and database size
    gomaxprocs: dict[str, int] = field(default_factory=dict)  # by binary; absent: Go's own choice
    # by binary, how late the kernel may end their timed sleeps (process runtime); absent: vc-apiserver's own
    timer_slack_ns: dict[str, int] = field(default_factory=dict)

    def env(self, binary: str) -> dict[str, str]:
        """The environment of one tenant binary."""
        env = {"GOGC": str(self.gogc)}
        if binary in self.gomaxprocs:
            env["GOMAXPROCS"] = str(self.gomaxprocs[binary])
        return env

    def timer_slack(self, binary: str) -> int:
        """The timer slack one tenant binary starts with, in nanoseconds; 0: the starting thread's."""
        return self.timer_slack_ns.get(binary, 0)

    def apiserver_flags(self) -> list[str]:
        """The tenant apiserver's flags of this profile (nothing where kube's default is kept)."""
        flags = [] if self.watch_cache else ["--watch-cache=false"]
        if not self.storage_metric_polls:
            flags += ["--etcd-count-metric-poll-period=0", "--etcd-db-metric-poll-interval=0"]
        return flags

    def with_gogc(self, gogc: int | None) -> TenantTuning:
        return self if gogc is None else replace(self, gogc=gogc)


LEAN = TenantTuning("lean", gogc=50, watch_cache=False, storage_metric_polls=False,
                    gomaxprocs={ETCD: 1, APISERVER: 2, CONTROLLER_MANAGER: 1, SCHEDULER: 1},
                    timer_slack_ns={ETCD: 50_000_000, APISERVER: 20_000_000, CONTROLLER_MANAGER: 50_000_000,
                                    SCHEDULER: 50_000_000})
# kube's and Go's defaults: what the components cost untuned
STOCK = TenantTuning("stock", gogc=100, watch_cache=True, storage_metric_polls=True)
PROFILES = {t.name: t for t in (LEAN, STOCK)}
