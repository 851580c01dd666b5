"""``vc-apiserver``: flags in kube's vocabulary, TLS, and the event loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys

import uvloop
from aiohttp import web

from .app import STATE, ServerState, build_app, version_info
from .auth import (
    AlwaysAllowAuthorizer,
    Authenticator,
    Authorizer,
    ClientCertAuthenticator,
    PrivilegedGroupAuthorizer,
    TokenFileAuthenticator,
    UnionAuthenticator,
)
from .compactor import Compactor
from .etcd import EtcdClient, EtcdConfig
from .metrics import Metrics

log = logging.getLogger("vc-apiserver")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vc-apiserver", description=__doc__)
    p.add_argument("--bind-address", default="0.0.0.0", help="address to serve HTTPS on")
    p.add_argument("--secure-port", type=int, default=6443, help="port to serve HTTPS on")
    p.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    p.add_argument("--tls-private-key-file", required=True, help="serving key (PEM)")
    p.add_argument("--client-ca-file", help="CA that signs client certificates (CN = user, O = groups)")
    p.add_argument("--token-auth-file", help="static bearer tokens: token,user,uid,\"group1,group2\"")
    p.add_argument("--authorization-mode", default="Standalone", choices=["Standalone", "AlwaysAllow"],
                   help="Standalone: only system:masters is allowed; AlwaysAllow: every authenticated user")
    p.add_argument("--etcd-servers", required=True, help="comma-separated etcd URLs")
    p.add_argument("--etcd-cafile")
    p.add_argument("--etcd-certfile")
    p.add_argument("--etcd-keyfile")
    p.add_argument("--etcd-request-timeout", type=float, default=5.0, help="seconds before etcd counts as down")
    p.add_argument("--etcd-compaction-interval", type=float, default=300.0,
                   help="seconds between compactions (0 disables)")
    p.add_argument("--watch-cache-history", type=int, default=10_000, help="events kept for resuming watches")
    p.add_argument("--enable-reconciler", default="true", choices=["true", "false"],
                   help="run the embedded reconcile loop (with leader election)")
    p.add_argument("--leader-elect-lease-duration", type=int, default=15, help="seconds")
    p.add_argument("--identity", default="", help="this replica's name for leader election (default: host:pid)")
    p.add_argument("-v", "--v", type=int, default=1, help="log verbosity (0-4)")
    return p.parse_args(argv)


def serving_context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.tls_cert_file, args.tls_private_key_file)
    ctx.set_alpn_protocols(["http/1.1"])
    if args.client_ca_file:
        ctx.load_verify_locations(args.client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def build_state(args: argparse.Namespace) -> ServerState:
    metrics = Metrics()
    etcd = EtcdClient(EtcdConfig(
        endpoints=[e.strip() for e in args.etcd_servers.split(",") if e.strip()],
        cafile=args.etcd_cafile, certfile=args.etcd_certfile, keyfile=args.etcd_keyfile,
        request_timeout=args.etcd_request_timeout), observe=metrics.observe_etcd)
    authenticators: list[Authenticator] = []
    if args.client_ca_file:
        authenticators.append(ClientCertAuthenticator())
    if args.token_auth_file:
        authenticators.append(TokenFileAuthenticator(args.token_auth_file))
    authorizer: Authorizer = (AlwaysAllowAuthorizer() if args.authorization_mode == "AlwaysAllow"
                              else PrivilegedGroupAuthorizer())
    return ServerState(etcd=etcd, authenticator=UnionAuthenticator(authenticators), authorizer=authorizer,
                       metrics=metrics, version=version_info())


async def serve(args: argparse.Namespace) -> None:
    state = build_state(args)
    app = build_app(state)
    state.store.cache.history_size = args.watch_cache_history
    compactor = Compactor(state.etcd, args.etcd_compaction_interval)
    app.on_startup.append(lambda _app: compactor.start())
    app.on_cleanup.append(lambda _app: compactor.stop())
    if args.enable_reconciler == "true":
        from reconciler.manager import attach
        attach(app, app[STATE], lease_duration=args.leader_elect_lease_duration, identity=args.identity)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, args.bind_address, args.secure_port, ssl_context=serving_context(args),
                       backlog=1024)
    await site.start()
    log.info("serving on https://%s:%d", args.bind_address, args.secure_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.v, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvloop.install()
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
