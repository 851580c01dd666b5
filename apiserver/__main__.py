"""``vc-apiserver``, the composition root: options (:mod:`apiserver.server.options`) → security and
state → the app, with the reconciler wired in here and nowhere else → the event loop."""

from __future__ import annotations

import argparse
import asyncio
import gc
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
from apiserver.kubeclient.kubeconfig import KubeconfigError
from apiserver.registry.admission import Admission, NamespaceLifecycle, RestoreAuthorization
from apiserver.server.app import SHUTDOWN_TIMEOUT, ServerState, build_app, version_info
from apiserver.server.metrics import Metrics
from apiserver.server.options import csv_list, parse_args, read_file, serving_context
from apiserver.storage.compactor import Compactor
from apiserver.storage.secrets import SecretStore, load_key_file
from apiserver.transport.http2 import AlpnSite

if TYPE_CHECKING:
    from reconciler.nodes.promoter import NodeJoiner
    from reconciler.runtime.base import ControlPlaneRuntime

log = logging.getLogger("vc-apiserver")


def host_client(path: str | None) -> KubeClient | None:
    if path:
        try:
            return KubeClient.from_kubeconfig(path)
        except KubeconfigError as e:  # a flag's value the server cannot use: said once, no traceback
            raise SystemExit(f"vc-apiserver: --kubeconfig: {e}") from None
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
        client_ca=read_file(args.client_ca_file), requestheader_ca=read_file(args.requestheader_client_ca_file),
        allowed_names=csv_list(args.requestheader_allowed_names),
        username_headers=csv_list(args.requestheader_username_headers),
        group_headers=csv_list(args.requestheader_group_headers),
        extra_prefixes=csv_list(args.requestheader_extra_headers_prefix))
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
    admission: list[Admission] = [NamespaceLifecycle(security.host)] if security.host is not None else []
    admission.append(RestoreAuthorization(security.authorizer))
    secrets = SecretStore(etcd, load_key_file(args.encryption_key_file)) if args.encryption_key_file else None
    return ServerState(etcd=etcd, authenticator=security.authenticator, authorizer=security.authorizer,
                       metrics=metrics, version=version_info(), host=security.host, admission=admission,
                       secrets=secrets, max_kubeconfig_expiration=args.max_kubeconfig_expiration,
                       wake_estimate=wake_estimate(args.control_plane_runtime),
                       max_requests_inflight=args.max_requests_inflight,
                       max_mutating_requests_inflight=args.max_mutating_requests_inflight)


def wake_estimate(runtime: str) -> int:
    """Seconds a hibernated control plane of ``runtime`` usually takes to be ready again (what the
    kubeconfig subresource tells whoever wakes one); any replica answers it, reconciling or not."""
    if runtime == "pods":
        from reconciler.runtime.pods import PodsRuntime

        return PodsRuntime.WAKE_ESTIMATE
    from reconciler.runtime.process import ProcessRuntime

    return ProcessRuntime.WAKE_ESTIMATE


def build_runtime(args: argparse.Namespace, host: KubeClient | None = None) -> ControlPlaneRuntime | None:
    from reconciler.runtime.process import ProcessRuntime
    from reconciler.runtime.tuning import PROFILES

    if args.control_plane_runtime == "none":
        return None
    if not args.encryption_key_file:
        raise SystemExit("--control-plane-runtime needs --encryption-key-file (tenant keys are stored encrypted)")
    tuning = PROFILES[args.tenant_tuning].with_gogc(args.tenant_gogc)
    if args.control_plane_runtime == "pods":
        from reconciler.runtime.pods import PodsRuntime

        if host is None:
            raise SystemExit("--control-plane-runtime=pods needs a host cluster: --host-kubeconfig, "
                             "--authentication-kubeconfig or in-cluster config")
        return PodsRuntime(host, backup_image=args.backup_image, snapshot_volume_size=args.snapshot_volume_size,
                           snapshot_storage_class=args.snapshot_storage_class or None, tuning=tuning)
    low, _, high = args.tenant_port_range.partition("-")
    ports = (int(low), int(high))
    ephemeral = ephemeral_port_range()
    if ephemeral and ports[0] <= ephemeral[1] and ephemeral[0] <= ports[1]:
        log.warning("--tenant-port-range %s overlaps the kernel's ephemeral ports %d-%d: an outgoing connection "
                    "can take a tenant component's port before it starts", args.tenant_port_range, *ephemeral)
    snapshots = Path(args.snapshot_dir).resolve() if args.snapshot_dir else None
    return ProcessRuntime(Path(args.runtime_dir).resolve(), Path(args.runtime_bin_dir).resolve(), ports, snapshots,
                          tuning=tuning)


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
    # TCP keep-alive is set by AlpnSite on every accepted connection, whichever protocol it speaks.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, max_line_size=1 << 20,
                           max_field_size=64 << 10, shutdown_timeout=SHUTDOWN_TIMEOUT,
                           keepalive_timeout=args.idle_connection_timeout, tcp_keepalive=False)
    await runner.setup()
    site = AlpnSite(runner, args.bind_address, args.secure_port, ssl_context=serving,
                    idle_timeout=args.idle_connection_timeout, backlog=1024,
                    max_streams=args.http2_max_streams_per_connection)
    await site.start()
    log.info("serving on https://%s:%d", args.bind_address, args.secure_port)
    # What exists once the server is up (modules, schemas, the OpenAPI document, the app) lives as long
    # as the process: out of the cycle collector's way, which would walk all of it in every full collection.
    gc.collect()
    gc.freeze()
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
