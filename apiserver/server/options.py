"""The server's options: flags in kube-apiserver's vocabulary (the ones it shares keep its names and
defaults), grouped by concern as kube's ``pkg/server/options`` groups them. Each group is a small
dataclass with ``add_flags`` (its flags, in their own section of ``--help``), ``validate`` (what its
flags cannot say together) and ``to_config`` (its frozen part of :class:`~apiserver.server.config.Config`);
:class:`ServerOptions` assembles them.

Kube's groups have ``ApplyTo(config)``, which writes into a mutable config; ours is frozen, so each group
returns its part and :meth:`ServerOptions.config` puts the parts together. The reconciler's flags are
the reconciler's own (``reconciler/options.py``): ``apiserver/__main__.py`` adds them beside these."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from apiserver.machinery.optiongroups import OptionSet
from apiserver.server.config import (
    AuthenticationConfig,
    AuthorizationConfig,
    Config,
    HostConfig,
    KubeconfigConfig,
    LimitsConfig,
    ServingConfig,
    StorageConfig,
)

__all__ = ["DESCRIPTION", "AuthenticationOptions", "AuthorizationOptions", "EtcdOptions", "HostOptions",
           "KubeconfigOptions", "LimitsOptions", "LoggingOptions", "ServerOptions", "ServingOptions", "csv_list"]

DESCRIPTION = ("The server's options: flags in kube-apiserver's vocabulary (the ones it shares keep its names and "
               "defaults), and what is read straight from them (the serving TLS context, CSV lists, files).")



def csv_list(value: str | None) -> tuple[str, ...] | None:
    """A comma-separated flag: None when not given (the host's ConfigMap decides), its non-empty items else."""
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


def _streams(value: str) -> int:
    count = int(value)
    if count < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a number of streams")
    return count


def _seconds(value: str) -> float:
    seconds = float(value)
    if not seconds > 0:  # aiohttp reads 0 as "close after every response"
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return seconds


@dataclass(frozen=True)
class ServingOptions:
    """Where and how HTTPS is served, and how serving stops (kube's SecureServingOptions and its
    shutdown delay)."""

    TITLE: ClassVar[str] = "Secure serving flags"

    bind_address: str
    secure_port: int
    tls_cert_file: str
    tls_private_key_file: str
    enable_http2: str
    http2_max_streams_per_connection: int
    idle_connection_timeout: float
    shutdown_delay_duration: float

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--bind-address", default="0.0.0.0", help="address to serve HTTPS on")
        p.add_argument("--secure-port", type=int, default=6443, help="port to serve HTTPS on")
        p.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
        p.add_argument("--tls-private-key-file", required=True, help="serving key (PEM)")
        p.add_argument("--enable-http2", default="true", choices=["true", "false"],
                       help="offer HTTP/2 by ALPN beside HTTP/1.1 (the host's aggregator then multiplexes its "
                            "requests on a few connections)")
        p.add_argument("--http2-max-streams-per-connection", type=_streams, default=1000,
                       help="streams a client may have open on one HTTP/2 connection; 0: Go's default, 250 "
                            "(kube's flag, with an aggregated API server's default: its client is a proxy)")
        p.add_argument("--idle-connection-timeout", type=_seconds, default=90.0,
                       help="seconds a client connection may stay open with no request in flight before it is "
                            "closed (HTTP/1.1 keep-alive; HTTP/2 with GOAWAY first); kube-apiserver's 90 s, which "
                            "matches Go clients' keep-alive")
        p.add_argument("--shutdown-delay-duration", type=float, default=0.0,
                       help="seconds to keep serving after SIGTERM while /readyz already fails, so that load "
                            "balancers and the host's aggregator stop sending requests first (kube's flag)")

    def validate(self) -> list[str]:
        return []  # argparse has refused what a flag alone cannot be

    def to_config(self) -> ServingConfig:
        return ServingConfig(
            bind_address=self.bind_address, secure_port=self.secure_port, cert_file=self.tls_cert_file,
            key_file=self.tls_private_key_file, http2=self.enable_http2 == "true",
            max_streams_per_connection=self.http2_max_streams_per_connection,
            idle_timeout=self.idle_connection_timeout, shutdown_delay=self.shutdown_delay_duration)


@dataclass(frozen=True)
class EtcdOptions:
    """The etcd the objects live in, the watch cache over it, compaction, and the key encrypting what
    must not be kept in the clear (kube's EtcdOptions, which hold its encryption config too)."""

    TITLE: ClassVar[str] = "Etcd flags"

    etcd_servers: str
    etcd_cafile: str | None
    etcd_certfile: str | None
    etcd_keyfile: str | None
    etcd_request_timeout: float
    etcd_compaction_interval: float
    watch_cache_history: int
    encryption_key_file: str | None

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--etcd-servers", required=True, help="comma-separated etcd URLs")
        p.add_argument("--etcd-cafile")
        p.add_argument("--etcd-certfile")
        p.add_argument("--etcd-keyfile")
        p.add_argument("--etcd-request-timeout", type=float, default=5.0, help="seconds before etcd counts as down")
        p.add_argument("--etcd-compaction-interval", type=float, default=300.0,
                       help="seconds between compactions (0 disables)")
        p.add_argument("--watch-cache-history", type=int, default=10_000, help="events kept for resuming watches")
        p.add_argument("--encryption-key-file",
                       help="AES key (base64, 16/24/32 bytes) encrypting tenant private keys in etcd; required by a "
                            "control-plane runtime")

    def validate(self) -> list[str]:
        return []

    def to_config(self) -> StorageConfig:
        return StorageConfig(
            servers=csv_list(self.etcd_servers) or (), cafile=self.etcd_cafile, certfile=self.etcd_certfile,
            keyfile=self.etcd_keyfile, request_timeout=self.etcd_request_timeout,
            compaction_interval=self.etcd_compaction_interval, watch_cache_history=self.watch_cache_history,
            encryption_key_file=self.encryption_key_file or None)


@dataclass(frozen=True)
class AuthenticationOptions:
    """Who a request is: client certificates, static tokens, the front proxy's headers and the host's
    TokenReview (kube's DelegatingAuthenticationOptions with its client-CA and token-file flags)."""

    TITLE: ClassVar[str] = "Authentication flags"

    client_ca_file: str | None
    token_auth_file: str | None
    authentication_kubeconfig: str | None
    requestheader_client_ca_file: str | None
    requestheader_allowed_names: str | None
    requestheader_username_headers: str | None
    requestheader_group_headers: str | None
    requestheader_extra_headers_prefix: str | None

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--client-ca-file", help="CA that signs client certificates (CN = user, O = groups); "
                                                "replaces the host ConfigMap's client-ca-file when delegating")
        p.add_argument("--token-auth-file", help="static bearer tokens: token,user,uid,\"group1,group2\"")
        p.add_argument("--authentication-kubeconfig",
                       help="host kubeconfig for TokenReview and the extension-apiserver-authentication ConfigMap")
        p.add_argument("--requestheader-client-ca-file", help="overrides the host ConfigMap's front-proxy CA")
        p.add_argument("--requestheader-allowed-names", help="comma-separated allowed front-proxy CNs")
        p.add_argument("--requestheader-username-headers", help="comma-separated, e.g. X-Remote-User")
        p.add_argument("--requestheader-group-headers", help="comma-separated, e.g. X-Remote-Group")
        p.add_argument("--requestheader-extra-headers-prefix", help="comma-separated, e.g. X-Remote-Extra-")

    def validate(self) -> list[str]:
        return []

    def to_config(self) -> AuthenticationConfig:
        return AuthenticationConfig(
            client_ca_file=self.client_ca_file or None, token_auth_file=self.token_auth_file or None,
            kubeconfig=self.authentication_kubeconfig or None,
            requestheader_client_ca_file=self.requestheader_client_ca_file or None,
            requestheader_allowed_names=csv_list(self.requestheader_allowed_names),
            requestheader_username_headers=csv_list(self.requestheader_username_headers),
            requestheader_group_headers=csv_list(self.requestheader_group_headers),
            requestheader_extra_headers_prefix=csv_list(self.requestheader_extra_headers_prefix))


@dataclass(frozen=True)
class AuthorizationOptions:
    """Whether a request may: SubjectAccessReview against the host, or the standalone rules
    (kube's DelegatingAuthorizationOptions)."""

    TITLE: ClassVar[str] = "Authorization flags"

    authorization_kubeconfig: str | None
    authorization_mode: str | None

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--authorization-kubeconfig", help="host kubeconfig for SubjectAccessReview")
        p.add_argument("--authorization-mode", choices=["Standalone", "AlwaysAllow", "Delegated"],
                       help="Delegated (default with a host): SubjectAccessReview; Standalone (default without): "
                            "only system:masters; AlwaysAllow: every authenticated user")

    def validate(self) -> list[str]:
        return []  # Delegated without a host is only known once the config is complete (in-cluster or not)

    def to_config(self) -> AuthorizationConfig:
        return AuthorizationConfig(mode=self.authorization_mode, kubeconfig=self.authorization_kubeconfig or None)


@dataclass(frozen=True)
class HostOptions:
    """The host cluster the server works in beside authentication: namespaces (admission), Events, and
    what the reconciler makes there."""

    TITLE: ClassVar[str] = "Host cluster flags"

    host_kubeconfig: str | None

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--host-kubeconfig",
                       help="host kubeconfig for namespaces and the reconciler (default: --authentication-kubeconfig)")

    def validate(self) -> list[str]:
        return []

    def to_config(self) -> HostConfig:
        return HostConfig(kubeconfig=self.host_kubeconfig or None)


@dataclass(frozen=True)
class LimitsOptions:
    """How much is served at once (kube's max-in-flight limits)."""

    TITLE: ClassVar[str] = "Limits flags"

    max_requests_inflight: int
    max_mutating_requests_inflight: int

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--max-requests-inflight", type=int, default=400,
                       help="read-only requests served at once before answering 429 (0 = no limit)")
        p.add_argument("--max-mutating-requests-inflight", type=int, default=200,
                       help="mutating requests served at once before answering 429 (0 = no limit)")

    def validate(self) -> list[str]:
        return []

    def to_config(self) -> LimitsConfig:
        return LimitsConfig(max_requests_inflight=self.max_requests_inflight,
                            max_mutating_requests_inflight=self.max_mutating_requests_inflight)


@dataclass(frozen=True)
class KubeconfigOptions:
    """The ``kubeconfig`` subresource: how long the credentials it hands out may live."""

    TITLE: ClassVar[str] = "Kubeconfig subresource flags"

    max_kubeconfig_expiration: int

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("--max-kubeconfig-expiration", type=int, default=365 * 86400,
                       help="longest lifetime, in seconds, of a kubeconfig handed out by the kubeconfig subresource")

    def validate(self) -> list[str]:
        return []

    def to_config(self, wake_estimate: int) -> KubeconfigConfig:
        return KubeconfigConfig(max_expiration=self.max_kubeconfig_expiration, wake_estimate=wake_estimate)


@dataclass(frozen=True)
class LoggingOptions:
    """The process's log verbosity (kube's ``-v``). It configures the process, not the server: the
    composition root applies it before anything logs."""

    TITLE: ClassVar[str] = "Logs flags"

    v: int

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        p = parser.add_argument_group(cls.TITLE)
        p.add_argument("-v", "--v", type=int, default=1, help="log verbosity (0-4)")

    def validate(self) -> list[str]:
        return []

    @property
    def level(self) -> int:
        return {0: logging.WARNING, 1: logging.INFO}.get(self.v, logging.DEBUG)

    def apply(self) -> None:
        logging.basicConfig(level=self.level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@dataclass(frozen=True)
class ServerOptions(OptionSet):
    """The server's option groups, in the order ``--help`` lists them."""

    GROUPS: ClassVar[dict[str, Any]] = {
        "serving": ServingOptions, "etcd": EtcdOptions, "authentication": AuthenticationOptions,
        "authorization": AuthorizationOptions, "host": HostOptions, "limits": LimitsOptions,
        "kubeconfig": KubeconfigOptions,
    }

    serving: ServingOptions
    etcd: EtcdOptions
    authentication: AuthenticationOptions
    authorization: AuthorizationOptions
    host: HostOptions
    limits: LimitsOptions
    kubeconfig: KubeconfigOptions

    def config(self, *, wake_estimate: int, kubernetes_versions: tuple[str, ...]) -> Config:
        """The frozen config the flags say. ``wake_estimate`` is what the composition root knows of the
        control-plane runtime: the seconds a hibernated control plane takes to wake, which the
        ``kubeconfig`` subresource tells whoever wakes one; and the Kubernetes versions tenants may run, newest
        first (admission checks ``spec.kubernetesVersion`` against them)."""
        return Config(serving=self.serving.to_config(), etcd=self.etcd.to_config(),
                      authentication=self.authentication.to_config(), authorization=self.authorization.to_config(),
                      host=self.host.to_config(), limits=self.limits.to_config(),
                      kubeconfig=self.kubeconfig.to_config(wake_estimate), kubernetes_versions=kubernetes_versions)
