"""The server's configuration, as k8s.io/apiserver's ``server/config.go`` has it: a frozen :class:`Config`
made from the options (:mod:`apiserver.server.options`); :meth:`Config.complete` fills what depends on
other fields and on where the process runs, giving a :class:`CompletedConfig`, from which
:func:`apiserver.server.new.new_server` builds the server. Config imports nothing of what it builds.

Nothing created at runtime (clients, caches, tasks) is kept here: that is the built server's."""

from __future__ import annotations

from dataclasses import dataclass, fields

from apiserver.kubeclient.client import KubeClient, in_cluster
from apiserver.kubeclient.kubeconfig import KubeconfigError
from apiserver.machinery.incluster import running_in_cluster

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
    kubernetes_versions: tuple[str, ...]  # what tenants may run, newest first

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

