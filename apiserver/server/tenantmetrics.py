"""Metering: what each VirtualCluster costs, as ``virtualcluster_*`` series labelled ``namespace`` and
``name``, in Prometheus conventions.

Computed at each scrape: the phase, the slice and the promoted nodes from the watch cache; the seconds
awake and hibernated accumulated by this replica between scrapes (counters, so a restart is a reset
that ``rate()`` already handles); the credentials this replica issued; and the control plane's cpu and
memory from the runtime where it can measure its components (:attr:`TenantMetrics.usage`, handed in by
the composition root). A VirtualCluster that is gone takes its series with it, so the cardinality is
that of the VirtualClusters that exist.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from apiserver.apis import hibernation
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.quantity import QuantityError, parse_quantity
from apiserver.storage.cacher import WatchCache

__all__ = ["ControlPlaneUsage", "TenantMetrics"]

LABELS = ["namespace", "name"]
PHASES = ("Pending", "Preparing", "Initialized", "Completed", "Updating", "Hibernating", "Hibernated", "Waking",
          "Deleting")
ControlPlaneUsage = tuple[float, int]  # cpu seconds used so far, resident memory in bytes
Key = tuple[str, str]


def _number(value: object) -> float | None:
    try:
        return float(parse_quantity(str(value)))
    except QuantityError:
        return None


def _resources(values: Mapping[str, object], *names: str) -> float | None:
    """The first of ``names`` a ResourceList holds, as a number (cores, bytes)."""
    for name in names:
        if name in values:
            return _number(values[name])
    return None


class TenantMetrics(Collector):
    def __init__(self, cache: WatchCache, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.clock = clock
        self.usage: Callable[[str, str], ControlPlaneUsage | None] | None = None
        self._issued: dict[Key, int] = {}
        self._seen: dict[Key, tuple[float, bool]] = {}  # when last scraped, and whether it slept then
        self._awake: dict[Key, float] = {}
        self._asleep: dict[Key, float] = {}

    def issued(self, namespace: str, name: str) -> None:
        """One credential issued for the VirtualCluster (the kubeconfig subresource)."""
        self._issued[(namespace, name)] = self._issued.get((namespace, name), 0) + 1

    def _families(self) -> dict[str, Metric]:
        def gauge(name: str, doc: str, *extra: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"virtualcluster_{name}", doc, labels=[*LABELS, *extra])

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(f"virtualcluster_{name}", doc, labels=LABELS)
        return {
            "phase": gauge("phase", "1 for the VirtualCluster's current phase, 0 for the others.", "phase"),
            "awake": counter("awake_seconds", "Seconds the control plane was not hibernated, as seen by this "
                                              "replica."),
            "asleep": counter("hibernated_seconds", "Seconds hibernated (or hibernating), as seen by this replica."),
            "slice_cpu": gauge("slice_cpu_allocated_cores", "cpu of the shared slice (its virtual node's capacity)."),
            "slice_memory": gauge("slice_memory_allocated_bytes", "Memory of the shared slice."),
            "slice_cpu_used": gauge("slice_cpu_requested_cores", "cpu requested by the slice's host pods."),
            "slice_memory_used": gauge("slice_memory_requested_bytes", "Memory requested by the slice's host pods."),
            "cp_cpu": counter("control_plane_cpu_seconds", "cpu time used by the control plane's components."),
            "cp_memory": gauge("control_plane_memory_bytes", "Resident memory of the control plane's components."),
            "nodes": gauge("promoted_nodes", "Host nodes promoted whole into the VirtualCluster."),
            "issued": counter("credentials_issued", "Credentials issued by the kubeconfig subresource on this "
                                                    "replica."),
        }

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        now = self.clock()
        present: set[Key] = set()
        for entry in self.cache.sorted_entries():
            vc = VirtualCluster(entry.obj)
            key = (vc.meta.namespace, vc.meta.name)
            labels = list(key)
            present.add(key)
            phase = vc.status.phase or "Pending"
            for each in PHASES:
                families["phase"].add_metric([*labels, each], 1.0 if each == phase else 0.0)
            asleep = phase in hibernation.HIBERNATION_PHASES
            last, slept = self._seen.get(key, (now, asleep))
            into = self._asleep if slept else self._awake
            into[key] = into.get(key, 0.0) + (now - last)
            self._seen[key] = (now, asleep)
            families["awake"].add_metric(labels, self._awake.get(key, 0.0))
            families["asleep"].add_metric(labels, self._asleep.get(key, 0.0))
            slice_ = vc.spec.slice
            if slice_ is not None:
                used = (vc.status.shared_resources or {}).get("used") or {}
                for family, amount in (("slice_cpu", _resources(slice_, "cpu")),
                                       ("slice_memory", _resources(slice_, "memory")),
                                       ("slice_cpu_used", _resources(used, "requests.cpu", "cpu")),
                                       ("slice_memory_used", _resources(used, "requests.memory", "memory"))):
                    if amount is not None:
                        families[family].add_metric(labels, amount)
            families["nodes"].add_metric(labels, float(len(vc.status.promoted_nodes)))
            families["issued"].add_metric(labels, float(self._issued.get(key, 0)))
            measured = self.usage(*key) if self.usage is not None else None
            if measured is not None:
                families["cp_cpu"].add_metric(labels, measured[0])
                families["cp_memory"].add_metric(labels, float(measured[1]))
        for gone in (set(self._seen) | set(self._issued)) - present:
            for kept in (self._seen, self._awake, self._asleep, self._issued):
                kept.pop(gone, None)
        yield from families.values()

