"""Prometheus metrics, named as kube-apiserver names them where there is an equivalent."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from apiserver.auth.authn import Attributes

REQUEST_LABELS = ["verb", "group", "version", "resource", "subresource", "scope"]
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "apiserver_request_total", "Requests by verb, group, version, resource, subresource, scope and HTTP code.",
            [*REQUEST_LABELS, "code"], registry=self.registry)
        self.latency = Histogram(
            "apiserver_request_duration_seconds",
            "Request latency by verb, group, version, resource, subresource and scope.",
            REQUEST_LABELS, buckets=_BUCKETS, registry=self.registry)
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

    def request_served(self, method: str, attrs: Attributes, code: int, seconds: float | None) -> None:
        """One finished request; ``seconds`` is None for a watch (its duration is not a latency).

        Labelled as kube-apiserver labels it, so that its dashboards and SLO rules (which select
        writes as ``verb=~"POST|PUT|PATCH|DELETE"``, lists by ``scope``) read ours unchanged."""
        scope = request_scope(attrs)
        labels = (reported_verb(method, attrs, scope), attrs.group, attrs.version,
                  attrs.resource if attrs.resource_request else "", attrs.subresource, scope)
        if seconds is not None:
            self._child(self.latency, *labels).observe(seconds)
        self._child(self.requests, *labels, str(code)).inc()

    def observe_etcd(self, operation: str, seconds: float, ok: bool) -> None:
        self._child(self.etcd_latency, operation, "success" if ok else "error").observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "CONNECT"})


def request_scope(attrs: Attributes) -> str:
    """kube's ``scope`` label (CleanScope): one object, a namespace, the cluster, or none."""
    if attrs.name or attrs.verb == "create":
        return "resource"
    if attrs.namespace:
        return "namespace"
    return "cluster" if attrs.resource_request else ""


def reported_verb(method: str, attrs: Attributes, scope: str) -> str:
    """kube's ``verb`` label (CanonicalVerb, CleanVerb): the HTTP method, except that a GET of a
    collection is LIST and one with ``watch`` is WATCH; a method kube does not know is ``other``."""
    if attrs.verb == "watch":
        return "WATCH"
    if method in ("GET", "HEAD"):
        return "LIST" if scope in ("namespace", "cluster") else "GET"
    return method if method in _METHODS else "other"
