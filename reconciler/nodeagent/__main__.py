"""``python -m reconciler.nodeagent``: the node agent, one per host node (see apiservice/deploy/agent)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import signal
import socket
import sys
from pathlib import Path

from aiohttp import web

from reconciler.nodeagent import CLIENT_CN, DEFAULT_PORT
from reconciler.nodeagent.files import KUBEADM, KubeletPaths
from reconciler.nodeagent.server import AgentConfig, NodeAgent, build_app, serving_context

log = logging.getLogger("node-agent")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reconciler.nodeagent", description=__doc__)
    p.add_argument("--listen", default=f"0.0.0.0:{DEFAULT_PORT}", help="address:port to serve HTTPS on (default %(default)s)")
    p.add_argument("--tls-cert", required=True, help="serving certificate (PEM)")
    p.add_argument("--tls-key", required=True, help="serving key (PEM)")
    p.add_argument("--client-ca", required=True,
                   help="CA that signs client certificates; a client without one fails the TLS handshake")
    p.add_argument("--allowed-client-cn", action="append",
                   help=f"client certificate CN allowed to call the agent (repeatable; default {CLIENT_CN}); "
                        "other names get 403")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME") or socket.gethostname(),
                   help="the node this agent runs on (default $NODE_NAME, else the hostname); joins for another "
                        "node are refused")
    p.add_argument("--state-dir", default="/var/lib/kosmos-node-agent",
                   help="where the join state and the saved kubelet files live; keep it on the host "
                        "(default %(default)s)")
    p.add_argument("--kubelet-kubeconfig", default=str(KUBEADM.kubeconfig),
                   help="the kubelet's kubeconfig, its --kubeconfig (default %(default)s)")
    p.add_argument("--kubelet-ca", default=str(KUBEADM.ca),
                   help="the CA file the kubelet trusts (its clientCAFile); holds the tenant CA while joined "
                        "(default %(default)s)")
    p.add_argument("--kubelet-client-cert", default=str(KUBEADM.credential),
                   help="the kubelet's client certificate and key (one PEM file); holds the tenant credential "
                        "while joined (default %(default)s)")
    p.add_argument("--restart-command", default="systemctl restart kubelet",
                   help="how to restart the kubelet: split like a shell line, executed without a shell "
                        "(default %(default)r)")
    p.add_argument("--restart-timeout", type=float, default=60.0, help="seconds the restart command may take (default %(default)s)")
    p.add_argument("-v", "--v", type=int, default=1, help="log verbosity (0-4)")
    return p.parse_args(argv)


def config_from(args: argparse.Namespace) -> AgentConfig:
    command = tuple(shlex.split(args.restart_command))
    if not command:
        raise SystemExit("--restart-command must not be empty")
    paths = KubeletPaths(Path(args.kubelet_kubeconfig).absolute(), Path(args.kubelet_ca).absolute(),
                         Path(args.kubelet_client_cert).absolute())
    return AgentConfig(args.node_name, paths, Path(args.state_dir).absolute(), command, args.restart_timeout)


async def serve(args: argparse.Namespace) -> None:
    agent = NodeAgent(config_from(args))
    host, _, port = args.listen.rpartition(":")
    runner = web.AppRunner(build_app(agent, frozenset(args.allowed_client_cn or [CLIENT_CN])), access_log=None,
                           handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]") or None, int(port),
                       ssl_context=serving_context(args.tls_cert, args.tls_key, args.client_ca))
    await site.start()
    joined = agent.status()
    log.info("node agent for %s serving on https://%s (%s)", args.node_name, args.listen,
             f"joined to {joined['virtualCluster']}" if joined["joined"] else "not joined")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.v, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
