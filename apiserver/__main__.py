"""``vc-apiserver``: flags in kube's vocabulary, TLS, and the event loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import uvloop
from aiohttp import web

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
from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.kubeclient.client import KubeClient, in_cluster, running_in_cluster
from apiserver.registry.admission import NamespaceLifecycle
from apiserver.server.app import SHUTDOWN_TIMEOUT, ServerState, build_app, version_info
from apiserver.server.metrics import Metrics
from apiserver.storage.compactor import Compactor
from apiserver.storage.secrets import SecretStore, load_key_file

if TYPE_CHECKING:
    from reconciler.nodes.promoter import NodeJoiner
    from reconciler.runtime.base import ControlPlaneRuntime

log = logging.getLogger("vc-apiserver")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vc-apiserver", description=__doc__)
    p.add_argument("--bind-address", default="0.0.0.0", help="address to serve HTTPS on")
    p.add_argument("--secure-port", type=int, default=6443, help="port to serve HTTPS on")
    p.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    p.add_argument("--tls-private-key-file", required=True, help="serving key (PEM)")
    p.add_argument("--client-ca-file", help="CA that signs client certificates (CN = user, O = groups); "
                                            "replaces the host ConfigMap's client-ca-file when delegating")
    p.add_argument("--token-auth-file", help="static bearer tokens: token,user,uid,\"group1,group2\"")
    p.add_argument("--authentication-kubeconfig",
                   help="host kubeconfig for TokenReview and the extension-apiserver-authentication ConfigMap")
    p.add_argument("--authorization-kubeconfig", help="host kubeconfig for SubjectAccessReview")
    p.add_argument("--host-kubeconfig",
                   help="host kubeconfig for namespaces and the reconciler (default: --authentication-kubeconfig)")
    p.add_argument("--requestheader-client-ca-file", help="overrides the host ConfigMap's front-proxy CA")
    p.add_argument("--requestheader-allowed-names", help="comma-separated allowed front-proxy CNs")
    p.add_argument("--requestheader-username-headers", help="comma-separated, e.g. X-Remote-User")
    p.add_argument("--requestheader-group-headers", help="comma-separated, e.g. X-Remote-Group")
    p.add_argument("--requestheader-extra-headers-prefix", help="comma-separated, e.g. X-Remote-Extra-")
    p.add_argument("--authorization-mode", choices=["Standalone", "AlwaysAllow", "Delegated"],
                   help="Delegated (default with a host): SubjectAccessReview; Standalone (default without): "
                        "only system:masters; AlwaysAllow: every authenticated user")
    p.add_argument("--etcd-servers", required=True, help="comma-separated etcd URLs")
    p.add_argument("--etcd-cafile")
    p.add_argument("--etcd-certfile")
    p.add_argument("--etcd-keyfile")
    p.add_argument("--etcd-request-timeout", type=float, default=5.0, help="seconds before etcd counts as down")
    p.add_argument("--etcd-compaction-interval", type=float, default=300.0,
                   help="seconds between compactions (0 disables)")
    p.add_argument("--watch-cache-history", type=int, default=10_000, help="events kept for resuming watches")
    p.add_argument("--shutdown-delay-duration", type=float, default=0.0,
                   help="seconds to keep serving after SIGTERM while /readyz already fails, so that load "
                        "balancers and the host's aggregator stop sending requests first (kube's flag)")
    p.add_argument("--enable-reconciler", default="true", choices=["true", "false"],
                   help="run the embedded reconcile loop (with leader election)")
    p.add_argument("--leader-elect-lease-duration", type=int, default=15, help="seconds")
    p.add_argument("--control-plane-runtime", default="none", choices=["none", "process", "pods"],
                   help="how tenant control planes run: process = local processes (playground, tests); "
                        "pods = workloads in the host cluster (production)")
    p.add_argument("--runtime-dir", default=".local/tenants", help="process runtime: tenant data directories")
    p.add_argument("--runtime-bin-dir", default=".local/bin",
                   help="process runtime: where etcd, kube-apiserver, kube-controller-manager, kube-scheduler are")
    p.add_argument("--tenant-port-range", default="20000-29999",
                   help="process runtime: ports for tenant components; keep it outside the kernel's ephemeral "
                        "range (net.ipv4.ip_local_port_range), where any outgoing connection may take a port "
                        "between its allocation and its component's start")
    p.add_argument("--node-joiner", default="kwok", choices=["kwok", "agent"],
                   help="how promoted nodes join a tenant: kwok = simulated nodes beside the process runtime "
                        "(playground, tests); agent = each host node's kubelet, re-pointed by the node agent "
                        "(apiservice/deploy/agent)")
    p.add_argument("--node-agent-port", type=int, default=10350, help="agent joiner: the node agents' port")
    p.add_argument("--node-agent-ca-file", help="agent joiner: CA of the node agents' serving certificates")
    p.add_argument("--node-agent-client-cert-file",
                   help="agent joiner: client certificate for the node agents (CN kosmos:node-agent-client)")
    p.add_argument("--node-agent-client-key-file", help="agent joiner: its key")
    p.add_argument("--concurrent-reconciles", type=int, default=4, help="VirtualClusters reconciled at once")
    p.add_argument("--encryption-key-file",
                   help="AES key (base64, 16/24/32 bytes) encrypting tenant private keys in etcd; required by a "
                        "control-plane runtime")
    p.add_argument("--max-requests-inflight", type=int, default=400,
                   help="read-only requests served at once before answering 429 (0 = no limit)")
    p.add_argument("--max-mutating-requests-inflight", type=int, default=200,
                   help="mutating requests served at once before answering 429 (0 = no limit)")
    p.add_argument("--max-kubeconfig-expiration", type=int, default=365 * 86400,
                   help="longest lifetime, in seconds, of a kubeconfig handed out by the kubeconfig subresource")
    p.add_argument("--identity", default="", help="this replica's name for leader election (default: host:pid)")
    p.add_argument("-v", "--v", type=int, default=1, help="log verbosity (0-4)")
    return p.parse_args(argv)


def _csv(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _read(path: str | None) -> bytes:
    return Path(path).read_bytes() if path else b""


def serving_context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.tls_cert_file, args.tls_private_key_file)
    ctx.set_alpn_protocols(["http/1.1"])
    ctx.verify_mode = ssl.CERT_OPTIONAL
    if args.client_ca_file:
        ctx.load_verify_locations(args.client_ca_file)
    return ctx


def host_client(path: str | None) -> KubeClient | None:
    if path:
        return KubeClient.from_kubeconfig(path)
    if running_in_cluster():
        return KubeClient(in_cluster())
    return None


@dataclass
class Security:
    authenticator: Authenticator
    authorizer: Authorizer
    source: AuthenticationSource
    host: KubeClient | None


def build_security(args: argparse.Namespace, serving: ssl.SSLContext) -> Security:
    """Authenticators in kube's order: front proxy, client certificate, static token, TokenReview."""
    authn_client = host_client(args.authentication_kubeconfig)
    authz_client = host_client(args.authorization_kubeconfig) or authn_client
    host = host_client(args.host_kubeconfig) if args.host_kubeconfig else authn_client
    overrides = Overrides(
        client_ca=_read(args.client_ca_file), requestheader_ca=_read(args.requestheader_client_ca_file),
        allowed_names=_csv(args.requestheader_allowed_names),
        username_headers=_csv(args.requestheader_username_headers),
        group_headers=_csv(args.requestheader_group_headers),
        extra_prefixes=_csv(args.requestheader_extra_headers_prefix))
    source = AuthenticationSource(authn_client, overrides, serving)
    authenticators: list[Authenticator] = [RequestHeaderAuthenticator(source),
                                           ClientCertAuthenticator(lambda: source.client_ca)]
    if args.token_auth_file:
        authenticators.append(TokenFileAuthenticator(args.token_auth_file))
    if authn_client is not None:
        authenticators.append(TokenReviewAuthenticator(authn_client))
    mode = args.authorization_mode or ("Delegated" if authz_client is not None else "Standalone")
    authorizer: Authorizer
    if mode == "Delegated":
        if authz_client is None:
            raise SystemExit("--authorization-mode=Delegated needs --authorization-kubeconfig or in-cluster config")
        authorizer = SubjectAccessReviewAuthorizer(authz_client)
    elif mode == "AlwaysAllow":
        authorizer = AlwaysAllowAuthorizer()
    else:
        authorizer = PrivilegedGroupAuthorizer()
    return Security(UnionAuthenticator(authenticators), authorizer, source, host)


def build_state(args: argparse.Namespace, security: Security) -> ServerState:
    metrics = Metrics()
    etcd = EtcdClient(EtcdConfig(
        endpoints=[e.strip() for e in args.etcd_servers.split(",") if e.strip()],
        cafile=args.etcd_cafile, certfile=args.etcd_certfile, keyfile=args.etcd_keyfile,
        request_timeout=args.etcd_request_timeout), observe=metrics.observe_etcd)
    admission = [NamespaceLifecycle(security.host)] if security.host is not None else []
    secrets = SecretStore(etcd, load_key_file(args.encryption_key_file)) if args.encryption_key_file else None
    return ServerState(etcd=etcd, authenticator=security.authenticator, authorizer=security.authorizer,
                       metrics=metrics, version=version_info(), host=security.host, admission=admission,
                       secrets=secrets, max_kubeconfig_expiration=args.max_kubeconfig_expiration,
                       max_requests_inflight=args.max_requests_inflight,
                       max_mutating_requests_inflight=args.max_mutating_requests_inflight)


def build_runtime(args: argparse.Namespace, host: KubeClient | None = None) -> ControlPlaneRuntime | None:
    from reconciler.runtime.process import ProcessRuntime

    if args.control_plane_runtime == "none":
        return None
    if not args.encryption_key_file:
        raise SystemExit("--control-plane-runtime needs --encryption-key-file (tenant keys are stored encrypted)")
    if args.control_plane_runtime == "pods":
        from reconciler.runtime.pods import PodsRuntime

        if host is None:
            raise SystemExit("--control-plane-runtime=pods needs a host cluster: --host-kubeconfig, "
                             "--authentication-kubeconfig or in-cluster config")
        return PodsRuntime(host)
    low, _, high = args.tenant_port_range.partition("-")
    ports = (int(low), int(high))
    ephemeral = ephemeral_port_range()
    if ephemeral and ports[0] <= ephemeral[1] and ephemeral[0] <= ports[1]:
        log.warning("--tenant-port-range %s overlaps the kernel's ephemeral ports %d-%d: an outgoing connection "
                    "can take a tenant component's port before it starts", args.tenant_port_range, *ephemeral)
    return ProcessRuntime(Path(args.runtime_dir).resolve(), Path(args.runtime_bin_dir).resolve(), ports)


def ephemeral_port_range() -> tuple[int, int] | None:
    """The ports the kernel hands to outgoing connections (Linux), if it says."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def build_joiner(args: argparse.Namespace, host: KubeClient | None, secrets: SecretStore | None) -> NodeJoiner | None:
    """The agent joiner when asked for; None leaves the default (kwok beside the process runtime)."""
    if args.node_joiner != "agent":
        return None
    from reconciler.nodes.agentjoiner import AgentAccess, AgentJoiner

    files = (args.node_agent_ca_file, args.node_agent_client_cert_file, args.node_agent_client_key_file)
    if not all(files):
        raise SystemExit("--node-joiner=agent needs --node-agent-ca-file, --node-agent-client-cert-file and "
                         "--node-agent-client-key-file")
    if host is None or secrets is None:
        raise SystemExit("--node-joiner=agent needs a host cluster and a control-plane runtime")
    return AgentJoiner(host, secrets, AgentAccess.from_files(*files, port=args.node_agent_port))


async def serve(args: argparse.Namespace) -> None:
    serving = serving_context(args)
    security = build_security(args, serving)
    await security.source.start()
    state = build_state(args, security)
    app = build_app(state)
    state.cache.history_size = args.watch_cache_history
    compactor = Compactor(state.etcd, args.etcd_compaction_interval)
    app.on_startup.append(lambda _app: compactor.start())
    app.on_cleanup.append(lambda _app: compactor.stop())
    app.on_cleanup.append(lambda _app: security.source.stop())
    for client in {c for c in (security.host,) if c is not None}:
        app.on_cleanup.append(lambda _app, c=client: c.close())
    if args.enable_reconciler == "true":
        from reconciler.manager import attach  # the embedded loop is optional; import it only when used
        attach(app, registry=state.registry, cache=state.cache, etcd=state.etcd, host=state.host,
               events=state.events, secrets=state.secrets, runtime=build_runtime(args, security.host),
               lease_duration=args.leader_elect_lease_duration, identity=args.identity,
               workers=args.concurrent_reconciles, joiner=build_joiner(args, state.host, state.secrets))
    # Go's servers read up to 1 MiB of request line and headers; aiohttp's 8 KiB defaults would
    # refuse long label selectors and bearer tokens with a plain-text 400 instead of a Status.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, max_line_size=1 << 20,
                           max_field_size=64 << 10, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    site = web.TCPSite(runner, args.bind_address, args.secure_port, ssl_context=serving, backlog=1024)
    await site.start()
    log.info("serving on https://%s:%d", args.bind_address, args.secure_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # As kube-apiserver terminates: /readyz fails at once, everything is served for the delay, then
    # the listener closes, every watch ends cleanly (its client re-watches elsewhere), and requests
    # in flight get SHUTDOWN_TIMEOUT to finish.
    state.shutting_down = True
    log.info("shutting down: /readyz fails from now on; serving for %gs more (--shutdown-delay-duration)",
             args.shutdown_delay_duration)
    await asyncio.sleep(args.shutdown_delay_duration)
    await runner.cleanup()
    log.info("shut down")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.v, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvloop.install()
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
