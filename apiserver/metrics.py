"""Prometheus metrics, named as kube-apiserver names them where there is an equivalent."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "apiserver_request_total", "Requests by verb, resource, subresource and HTTP code.",
            ["verb", "resource", "subresource", "code"], registry=self.registry)
        self.latency = Histogram(
            "apiserver_request_duration_seconds", "Request latency by verb, resource and subresource.",
            ["verb", "resource", "subresource"], buckets=_BUCKETS, registry=self.registry)
        self.etcd_latency = Histogram(
            "etcd_request_duration_seconds", "etcd request latency by operation.",
            ["operation", "result"], buckets=_BUCKETS, registry=self.registry)
        self.watchers = Gauge(
            "apiserver_registered_watchers", "Open watch streams.", ["resource"], registry=self.registry)
        self.inflight = Gauge(
            "apiserver_current_inflight_requests", "Requests being served.", ["request_kind"],
            registry=self.registry)
        self.objects = Gauge(
            "apiserver_storage_objects", "Objects in the watch cache.", ["resource"], registry=self.registry)

        # labels() validates and locks on every call; a request would pay that four times.
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def inflight_of(self, kind: str) -> Any:
        return self._child(self.inflight, kind)

    def request_served(self, verb: str, resource: str, subresource: str, code: int, seconds: float | None) -> None:
        """One finished request; ``seconds`` is None for a watch (its duration is not a latency)."""
        if seconds is not None:
            self._child(self.latency, verb, resource, subresource).observe(seconds)
        self._child(self.requests, verb, resource, subresource, str(code)).inc()

    def observe_etcd(self, operation: str, seconds: float, ok: bool) -> None:
        self._child(self.etcd_latency, operation, "success" if ok else "error").observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
