"""The server built from a completed config, as k8s.io/apiserver's ``CompletedConfig.New`` builds it: the
serving TLS context, one client per host reached, authentication and authorization in kube's order,
the etcd client, the storage behind the watch cache, the registry and the app. It sits above both
:mod:`apiserver.server.config` (what to build) and :mod:`apiserver.server.app` (what is built)."""

from __future__ import annotations

import ssl
from pathlib import Path

from apiserver.apis.kubeversion import Offered
from apiserver.apis.resource import VIRTUALCLUSTERCREDENTIALS, VIRTUALCLUSTERS
from apiserver.auth.authn import (
    AlwaysAllowAuthorizer,
    Authenticator,
    Authorizer,
    ClientCertAuthenticator,
    PrivilegedGroupAuthorizer,
    TokenFileAuthenticator,
    UnionAuthenticator,
)
from apiserver.auth.delegated import (
    AuthenticationSource,
    Overrides,
    RequestHeaderAuthenticator,
    SubjectAccessReviewAuthorizer,
    TokenReviewAuthenticator,
)
from apiserver.etcd import client as etcd_client
from apiserver.kubeclient.client import KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.registry.admission import (
    Admission,
    KubernetesVersionAdmission,
    NamespaceLifecycle,
    PromoteAuthorization,
    RestoreAuthorization,
)
from apiserver.registry.credential import new_registry as credential_registry
from apiserver.registry.quota import QuotaAdmission
from apiserver.registry.virtualcluster import new_storage
from apiserver.server.app import Lifecycle, Server, build_app, version_info
from apiserver.server.config import ALWAYS_ALLOW, DELEGATED, CompletedConfig, HostAccess
from apiserver.server.metrics import Metrics
from apiserver.server.tenantmetrics import TenantMetrics
from apiserver.storage.cacher import WatchCache
from apiserver.storage.compactor import Compactor
from apiserver.storage.delegator import CachedStore
from apiserver.storage.etcd3 import Store
from apiserver.storage.secrets import SecretStore, load_key_file
from apiserver.transport.http2 import ALPN, HTTP11

__all__ = ["new_server", "serving_context"]


def serving_context(config: CompletedConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(config.serving.cert_file, config.serving.key_file)
    # HTTP/2 first: the host's aggregator then carries every proxied request on a few connections
    ctx.set_alpn_protocols([ALPN, HTTP11] if config.serving.http2 else [HTTP11])
    ctx.verify_mode = ssl.CERT_OPTIONAL
    if config.authentication.client_ca_file:
        ctx.load_verify_locations(config.authentication.client_ca_file)
    return ctx

def new_server(config: CompletedConfig) -> Server:
    """The server this config describes, built but not started (its app starts it). Call it on the
    event loop that will run it: its clients belong to that loop."""
    serving = serving_context(config)
    clients: dict[HostAccess, KubeClient] = {}

    def client(access: HostAccess | None) -> KubeClient | None:
        if access is None:
            return None
        if access not in clients:
            clients[access] = access.client()
        return clients[access]

    # One client per host reached (a kubeconfig, or in-cluster); a kubeconfig the server cannot use
    # stops it here.
    authn_client, authz_client, host = (client(config.authentication_host), client(config.authorization_host),
                                        client(config.host_access))
    source, authenticator = _authentication(config, authn_client, serving)
    authorizer = _authorization(config, authz_client)
    metrics = Metrics()
    etcd = etcd_client.EtcdClient(etcd_client.EtcdConfig(
        endpoints=list(config.etcd.servers), cafile=config.etcd.cafile, certfile=config.etcd.certfile,
        keyfile=config.etcd.keyfile, request_timeout=config.etcd.request_timeout), observe=metrics.observe_etcd)
    admission: list[Admission] = [NamespaceLifecycle(host)] if host is not None else []
    admission += [RestoreAuthorization(authorizer), PromoteAuthorization(authorizer),
                  KubernetesVersionAdmission(Offered.of(config.kubernetes_versions), host)]
    if host is not None:  # last, as kube's ResourceQuota: only what every other plugin admitted is charged
        admission.append(QuotaAdmission(host))
    key_file = config.etcd.encryption_key_file
    secrets = SecretStore(etcd, load_key_file(key_file)) if key_file else None
    # The storage the registry is handed: etcd behind the watch cache (storage.delegator decides).
    store = Store(etcd, VIRTUALCLUSTERS)
    cache = WatchCache(etcd, store.layout, history_size=config.etcd.watch_cache_history)
    virtualclusters = new_storage(CachedStore(store, cache), admission, secrets)
    credential_store = Store(etcd, VIRTUALCLUSTERCREDENTIALS)
    credentials_cache = WatchCache(etcd, credential_store.layout, history_size=config.etcd.watch_cache_history)
    credentials = credential_registry(CachedStore(credential_store, credentials_cache))
    events = EventRecorder(host)
    lifecycle = Lifecycle()
    tenant_metrics = TenantMetrics(cache)
    metrics.registry.register(tenant_metrics)
    app = build_app(
        etcd=etcd, cache=cache, virtualclusters=virtualclusters, credentials=credentials,
        credentials_cache=credentials_cache, host=host, events=events, metrics=metrics,
        authenticator=authenticator, authorizer=authorizer, limits=config.limits, kubeconfig=config.kubeconfig,
        version=version_info(), lifecycle=lifecycle, tenant_metrics=tenant_metrics)
    compactor = Compactor(etcd, config.etcd.compaction_interval)
    app.on_startup.append(lambda _app: compactor.start())
    app.on_cleanup.append(lambda _app: compactor.stop())
    app.on_cleanup.append(lambda _app: source.stop())
    for made in clients.values():
        app.on_cleanup.append(lambda _app, c=made: c.close())
    return Server(config=config, serving_context=serving, app=app, lifecycle=lifecycle, authentication=source,
                  etcd=etcd, cache=cache, registry=virtualclusters.registry, credentials=credentials, secrets=secrets,
                  host=host,
                  events=events, tenant_metrics=tenant_metrics)

def _authentication(config: CompletedConfig, client: KubeClient | None,
                    serving: ssl.SSLContext) -> tuple[AuthenticationSource, Authenticator]:
    """Authenticators in kube's order: front proxy, client certificate, static token, TokenReview."""
    a = config.authentication

    def listed(values: tuple[str, ...] | None) -> list[str] | None:
        return None if values is None else list(values)

    overrides = Overrides(
        client_ca=_read(a.client_ca_file), requestheader_ca=_read(a.requestheader_client_ca_file),
        allowed_names=listed(a.requestheader_allowed_names),
        username_headers=listed(a.requestheader_username_headers),
        group_headers=listed(a.requestheader_group_headers),
        extra_prefixes=listed(a.requestheader_extra_headers_prefix))
    source = AuthenticationSource(client, overrides, serving)
    authenticators: list[Authenticator] = [RequestHeaderAuthenticator(source),
                                           ClientCertAuthenticator(lambda: source.client_ca)]
    if a.token_auth_file:
        authenticators.append(TokenFileAuthenticator(a.token_auth_file))
    if client is not None:
        authenticators.append(TokenReviewAuthenticator(client))
    return source, UnionAuthenticator(authenticators)

def _authorization(config: CompletedConfig, client: KubeClient | None) -> Authorizer:
    if config.authorization_mode == DELEGATED:
        if client is None:
            raise SystemExit("--authorization-mode=Delegated needs --authorization-kubeconfig or in-cluster config")
        return SubjectAccessReviewAuthorizer(client)
    if config.authorization_mode == ALWAYS_ALLOW:
        return AlwaysAllowAuthorizer()
    return PrivilegedGroupAuthorizer()


def _read(path: str | None) -> bytes:
    return Path(path).read_bytes() if path else b""
