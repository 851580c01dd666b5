"""The server's options: flags in kube-apiserver's vocabulary (the ones it shares keep its names and
defaults), and what is read straight from them (the serving TLS context, CSV lists, files)."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

from apiserver import IMAGE
from apiserver.transport.http2 import ALPN, HTTP11

__all__ = ["csv_list", "parse_args", "read_file", "serving_context"]


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
    p.add_argument("--snapshot-dir", default="",
                   help="process runtime: where snapshots of tenant etcds (spec.backup) are kept; default: a "
                        "directory snapshots beside --runtime-dir")
    p.add_argument("--snapshot-volume-size", default="10Gi",
                   help="pods runtime: the size of the PersistentVolumeClaim virtualcluster-snapshots that each "
                        "namespace with VirtualClusters gets for their snapshots (spec.backup, restoreFrom)")
    p.add_argument("--snapshot-storage-class", default="",
                   help="pods runtime: that claim's StorageClass; default: the host's default class")
    p.add_argument("--backup-image", default=IMAGE,
                   help="pods runtime: the image of the pods that take and restore snapshots beside a tenant's "
                        "etcd (vc-apiserver's own, which carries etcdutl)")
    p.add_argument("--tenant-tuning", choices=("lean", "stock"), default="lean",
                   help="how the tenant components run: lean (GOGC=50, the apiserver's watch cache and storage "
                        "metric polls off, GOMAXPROCS 1 but for the apiserver's 2, and in the process runtime a "
                        "timer slack of 50 ms, 20 for the apiserver: less memory and idle CPU per tenant, the same "
                        "API) or stock (kube's and Go's defaults)")
    p.add_argument("--tenant-gogc", type=int, default=None,
                   help="GOGC of the tenant components, over the tuning's: how far a heap grows past what is live "
                        "before Go collects (lower: less memory per tenant, more CPU under load; Go's default is 100)")
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


def csv_list(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def read_file(path: str | None) -> bytes:
    return Path(path).read_bytes() if path else b""


def serving_context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.tls_cert_file, args.tls_private_key_file)
    # HTTP/2 first: the host's aggregator then carries every proxied request on a few connections
    ctx.set_alpn_protocols([ALPN, HTTP11] if args.enable_http2 == "true" else [HTTP11])
    ctx.verify_mode = ssl.CERT_OPTIONAL
    if args.client_ca_file:
        ctx.load_verify_locations(args.client_ca_file)
    return ctx
