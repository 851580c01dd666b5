"""The server's configuration, as k8s.io/apiserver's ``server/config.go`` has it: a frozen :class:`Config`
made from the options (:mod:`apiserver.server.options`); :meth:`Config.complete` fills what depends on
other fields and on where the process runs, giving a :class:`CompletedConfig`; :meth:`CompletedConfig.new`
builds the server from that: the serving TLS context, the host clients, authentication and authorization,
the etcd client, the storage, the registry and the app (:class:`~apiserver.server.app.Server`).

Nothing created at runtime (clients, caches, tasks) is kept here: that is the built server's."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, fields
from pathlib import Path

from apiserver.apis.resource import VIRTUALCLUSTERS
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
from apiserver.kubeclient.client import KubeClient, in_cluster
from apiserver.kubeclient.events import EventRecorder
from apiserver.kubeclient.kubeconfig import KubeconfigError
from apiserver.machinery.incluster import running_in_cluster
from apiserver.registry.admission import Admission, NamespaceLifecycle, RestoreAuthorization
from apiserver.registry.virtualcluster import new_storage
from apiserver.server.app import Lifecycle, Server, build_app, version_info
from apiserver.server.metrics import Metrics
from apiserver.storage.cacher import WatchCache
from apiserver.storage.compactor import Compactor
from apiserver.storage.delegator import CachedStore
from apiserver.storage.etcd3 import Store
from apiserver.storage.secrets import SecretStore, load_key_file
from apiserver.transport.http2 import ALPN, HTTP11

__all__ = ["AuthenticationConfig", "AuthorizationConfig", "CompletedConfig", "Config", "HostAccess", "HostConfig",
           "KubeconfigConfig", "LimitsConfig", "ServingConfig", "StorageConfig"]

DELEGATED, ALWAYS_ALLOW, STANDALONE = "Delegated", "AlwaysAllow", "Standalone"


@dataclass(frozen=True)
class ServingConfig:
    bind_address: str
    secure_port: int
    cert_file: str
    key_file: str
    http2: bool  # offered by ALPN beside HTTP/1.1
    max_streams_per_connection: int
    idle_timeout: float  # seconds a connection with no request in flight stays open
    shutdown_delay: float  # seconds served after SIGTERM while /readyz fails


@dataclass(frozen=True)
class StorageConfig:
    servers: tuple[str, ...]
    cafile: str | None
    certfile: str | None
    keyfile: str | None
    request_timeout: float
    compaction_interval: float  # 0: no compaction
    watch_cache_history: int
    encryption_key_file: str | None  # None: no tenant PKI is kept (no control-plane runtime)


@dataclass(frozen=True)
class AuthenticationConfig:
    client_ca_file: str | None
    token_auth_file: str | None
    kubeconfig: str | None  # the host's, for TokenReview and its authentication ConfigMap
    # None: what the host's ConfigMap says
    requestheader_client_ca_file: str | None
    requestheader_allowed_names: tuple[str, ...] | None
    requestheader_username_headers: tuple[str, ...] | None
    requestheader_group_headers: tuple[str, ...] | None
    requestheader_extra_headers_prefix: tuple[str, ...] | None


@dataclass(frozen=True)
class AuthorizationConfig:
    mode: str | None  # None: Delegated with a host, Standalone without (decided by complete())
    kubeconfig: str | None


@dataclass(frozen=True)
class HostConfig:
    kubeconfig: str | None  # None: the authentication kubeconfig's host (decided by complete())


@dataclass(frozen=True)
class LimitsConfig:
    max_requests_inflight: int  # 0: no limit
    max_mutating_requests_inflight: int


@dataclass(frozen=True)
class KubeconfigConfig:
    max_expiration: int  # seconds
    wake_estimate: int  # seconds a hibernated control plane of the configured runtime takes to wake


@dataclass(frozen=True)
class HostAccess:
    """Where a client of the host cluster comes from: a kubeconfig file, or (``kubeconfig`` None) the
    pod's in-cluster service account."""

    kubeconfig: str | None = None

    def client(self) -> KubeClient:
        if self.kubeconfig is None:
            return KubeClient(in_cluster())
        try:
            return KubeClient.from_kubeconfig(self.kubeconfig)
        except KubeconfigError as e:  # a flag's value the server cannot use: said once, no traceback
            raise SystemExit(f"vc-apiserver: --kubeconfig: {e}") from None


@dataclass(frozen=True)
class Config:
    serving: ServingConfig
    etcd: StorageConfig
    authentication: AuthenticationConfig
    authorization: AuthorizationConfig
    host: HostConfig
    limits: LimitsConfig
    kubeconfig: KubeconfigConfig

    def complete(self, *, in_cluster: bool | None = None) -> CompletedConfig:
        """Fills what the flags leave to other flags and to where the process runs (``in_cluster``: in a
        pod with a service account, detected when not said): which host each client talks to (the
        authentication kubeconfig's, else in-cluster; authorization and the host default to it) and the
        authorization mode (Delegated when there is a host to ask, else Standalone)."""
        if in_cluster is None:
            in_cluster = running_in_cluster()

        def access(kubeconfig: str | None) -> HostAccess | None:
            if kubeconfig:
                return HostAccess(kubeconfig)
            return HostAccess() if in_cluster else None

        authentication = access(self.authentication.kubeconfig)
        authorization = access(self.authorization.kubeconfig) or authentication
        host = access(self.host.kubeconfig) if self.host.kubeconfig else authentication
        mode = self.authorization.mode or (DELEGATED if authorization is not None else STANDALONE)
        return CompletedConfig(**{f.name: getattr(self, f.name) for f in fields(Config)},
                               authentication_host=authentication, authorization_host=authorization,
                               host_access=host, authorization_mode=mode)


@dataclass(frozen=True)
class CompletedConfig(Config):
    """A :class:`Config` with every default filled: only :meth:`Config.complete` makes one."""

    authentication_host: HostAccess | None  # TokenReview and the authentication ConfigMap
    authorization_host: HostAccess | None  # SubjectAccessReview
    host_access: HostAccess | None  # namespaces, Events, the reconciler
    authorization_mode: str

    def serving_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.serving.cert_file, self.serving.key_file)
        # HTTP/2 first: the host's aggregator then carries every proxied request on a few connections
        ctx.set_alpn_protocols([ALPN, HTTP11] if self.serving.http2 else [HTTP11])
        ctx.verify_mode = ssl.CERT_OPTIONAL
        if self.authentication.client_ca_file:
            ctx.load_verify_locations(self.authentication.client_ca_file)
        return ctx

    def new(self) -> Server:
        """The server this config describes, built but not started (its app starts it). Call it on the
        event loop that will run it: its clients belong to that loop."""
        serving = self.serving_context()
        clients: dict[HostAccess, KubeClient] = {}

        def client(access: HostAccess | None) -> KubeClient | None:
            if access is None:
                return None
            if access not in clients:
                clients[access] = access.client()
            return clients[access]

        # One client per host reached (a kubeconfig, or in-cluster); a kubeconfig the server cannot use
        # stops it here.
        authn_client, authz_client, host = (client(self.authentication_host), client(self.authorization_host),
                                            client(self.host_access))
        source, authenticator = self._authentication(authn_client, serving)
        authorizer = self._authorization(authz_client)
        metrics = Metrics()
        etcd = etcd_client.EtcdClient(etcd_client.EtcdConfig(
            endpoints=list(self.etcd.servers), cafile=self.etcd.cafile, certfile=self.etcd.certfile,
            keyfile=self.etcd.keyfile, request_timeout=self.etcd.request_timeout), observe=metrics.observe_etcd)
        admission: list[Admission] = [NamespaceLifecycle(host)] if host is not None else []
        admission.append(RestoreAuthorization(authorizer))
        key_file = self.etcd.encryption_key_file
        secrets = SecretStore(etcd, load_key_file(key_file)) if key_file else None
        # The storage the registry is handed: etcd behind the watch cache (storage.delegator decides).
        store = Store(etcd, VIRTUALCLUSTERS)
        cache = WatchCache(etcd, store.layout, history_size=self.etcd.watch_cache_history)
        virtualclusters = new_storage(CachedStore(store, cache), admission, secrets)
        events = EventRecorder(host)
        lifecycle = Lifecycle()
        app = build_app(
            etcd=etcd, cache=cache, virtualclusters=virtualclusters, events=events, metrics=metrics,
            authenticator=authenticator, authorizer=authorizer, limits=self.limits, kubeconfig=self.kubeconfig,
            version=version_info(), lifecycle=lifecycle)
        compactor = Compactor(etcd, self.etcd.compaction_interval)
        app.on_startup.append(lambda _app: compactor.start())
        app.on_cleanup.append(lambda _app: compactor.stop())
        app.on_cleanup.append(lambda _app: source.stop())
        for made in clients.values():
            app.on_cleanup.append(lambda _app, c=made: c.close())
        return Server(config=self, serving_context=serving, app=app, lifecycle=lifecycle, authentication=source,
                      etcd=etcd, cache=cache, registry=virtualclusters.registry, secrets=secrets, host=host,
                      events=events)

    def _authentication(self, client: KubeClient | None,
                        serving: ssl.SSLContext) -> tuple[AuthenticationSource, Authenticator]:
        """Authenticators in kube's order: front proxy, client certificate, static token, TokenReview."""
        a = self.authentication

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

    def _authorization(self, client: KubeClient | None) -> Authorizer:
        if self.authorization_mode == DELEGATED:
            if client is None:
                raise SystemExit("--authorization-mode=Delegated needs --authorization-kubeconfig or in-cluster config")
            return SubjectAccessReviewAuthorizer(client)
        if self.authorization_mode == ALWAYS_ALLOW:
            return AlwaysAllowAuthorizer()
        return PrivilegedGroupAuthorizer()


def _read(path: str | None) -> bytes:
    return Path(path).read_bytes() if path else b""
