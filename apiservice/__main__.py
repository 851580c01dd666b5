"""``python -m apiservice``: certificates, rendering, install and uninstall of vc-apiserver on a host.

  certs      serving CA + certificate (and, in-cluster, etcd's mutual TLS) in a directory; reused
  render     the manifests as a YAML stream, from the kustomize directories in apiservice/deploy
  install    apply them and wait until the APIService v1alpha1.kosmos.io is Available
  uninstall  delete what install created: the node agents first (if any), then the APIService

--node-joiner agent (certs, render, install) adds the node agent on every host node and its mutual
TLS, and starts an in-cluster vc-apiserver with the agent joiner (and the pods control-plane runtime).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import cast

from . import tls
from .install import InstallError, install, uninstall
from .kubectl import Kubectl, KubectlError, default_kubectl
from .manifests import JOINERS, MODES, Mode, render, to_yaml


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubectl", default=default_kubectl(),
                        help="kubectl binary (default: the repo's .local/bin/kubectl if built, else PATH)")
    joiner = argparse.ArgumentParser(add_help=False)
    joiner.add_argument("--node-joiner", choices=JOINERS, default="kwok",
                        help="agent: promote real host nodes through the node agent (deploy/agent), with its "
                             "certificates; kwok (default): vc-apiserver's default, nothing more")

    p = argparse.ArgumentParser(prog="python -m apiservice", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    certs = sub.add_parser("certs", parents=[joiner], help="create (or reuse) the certificates in a directory")
    certs.add_argument("--dir", type=Path, required=True)
    certs.add_argument("--service", default=tls.SERVICE)
    certs.add_argument("--namespace", default=tls.NAMESPACE)
    certs.add_argument("--local", action="store_true",
                       help="also name localhost and 127.0.0.1; no etcd certificates")

    def rendering(q: argparse.ArgumentParser, modes: tuple[str, ...]) -> None:
        q.add_argument("--mode", choices=modes, required=True,
                       help="cluster: server and etcd as workloads; local: server on the aggregator's localhost")
        q.add_argument("--port", type=int, help="local mode: the server's port (default: deploy/local's, 38443)")
        q.add_argument("--image", help="cluster mode: vc-apiserver's image")
        q.add_argument("--overlay", type=Path,
                       help="a kustomize directory to build instead of deploy/'s own (one that has deploy/<mode> "
                            "or deploy/cluster-agent among its resources); Secrets, caBundle and image are "
                            "filled in as usual")

    render_p = sub.add_parser("render", parents=[common, joiner], help="print the manifests (YAML stream)")
    rendering(render_p, MODES)
    render_p.add_argument("--cert-dir", type=Path,
                          help="fill in caBundle and the TLS Secrets from this directory (created if needed)")

    install_p = sub.add_parser("install", parents=[common, joiner], help="apply and wait until Available")
    install_p.add_argument("--kubeconfig", type=Path, required=True, help="the host cluster")
    rendering(install_p, MODES)
    install_p.add_argument("--cert-dir", type=Path, required=True, help="certificates, created if missing")
    install_p.add_argument("--wait-timeout", type=float, default=60.0,
                           help="seconds to wait for the APIService to be Available and the server to roll out")

    uninstall_p = sub.add_parser("uninstall", parents=[common], help="delete what install created")
    uninstall_p.add_argument("--kubeconfig", type=Path, required=True, help="the host cluster")
    uninstall_p.add_argument("--mode", choices=(*MODES, "all"), default="all",
                             help="which installation's objects (default: all)")
    uninstall_p.add_argument("--wait-timeout", type=float, default=60.0, help="seconds to wait for deletion")

    args = p.parse_args(argv)
    if args.command in ("render", "install"):
        if args.port is not None and args.mode != "local":
            p.error("--port applies to --mode local")
        if args.image is not None and args.mode != "cluster":
            p.error("--image applies to --mode cluster")
        if args.overlay is not None and not (args.overlay / "kustomization.yaml").is_file():
            p.error(f"--overlay {args.overlay}: no kustomization.yaml there")
    return args


def say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "certs":
            certs = tls.ensure_certs(args.dir, args.service, args.namespace, local=args.local,
                                     node_agent=args.node_joiner == "agent")
            for path in sorted(certs.path.glob("*.crt")):
                say(str(path))
            return 0
        kubectl = Kubectl(args.kubectl, getattr(args, "kubeconfig", None))
        if args.command == "render":
            agent = args.node_joiner == "agent"
            certs = tls.ensure_certs(args.cert_dir, local=args.mode == "local", node_agent=agent) \
                if args.cert_dir else None
            sys.stdout.write(to_yaml(render(kubectl, args.mode, certs, port=args.port, image=args.image,
                                            joiner=args.node_joiner, overlay=args.overlay)))
        elif args.command == "install":
            install(kubectl, args.mode, args.cert_dir, args.port, args.image, args.wait_timeout, say,
                    joiner=args.node_joiner, overlay=args.overlay)
        elif args.command == "uninstall":
            modes = MODES if args.mode == "all" else (cast(Mode, args.mode),)
            uninstall(kubectl, modes, args.wait_timeout, say)
        return 0
    except (InstallError, KubectlError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
