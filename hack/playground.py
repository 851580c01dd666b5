"""``make up`` / ``make down``: the whole stack on fixed loopback ports, idempotent."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from hack.harness import LOCAL
from hack.stack import Stack, StackPorts

PORTS = StackPorts(host_apiserver=36443, host_etcd=32381, host_etcd_peer=32382, vc_etcd=32379, vc_etcd_peer=32380,
                   vc_apiserver=38443)


def stack(real_nodes: int = 0) -> Stack:
    # With real nodes, as in production: vc-apiserver installed inside the host from its image, tenant
    # control planes as host pods on the real control-plane node.
    return Stack(LOCAL, PORTS, runtime="pods" if real_nodes else "process", run_dir=LOCAL / "run",
                 real_nodes=real_nodes, vc_mode="cluster" if real_nodes else "local")


def up(nodes: int, real_nodes: int) -> None:
    started_at = time.monotonic()
    s = stack(real_nodes)
    started = s.up(nodes, say=print)
    shutil.copyfile(s.kubeconfig, LOCAL / "kubeconfig")
    os.chmod(LOCAL / "kubeconfig", 0o600)
    what = f"started {', '.join(started)}" if started else "nothing restarted"
    print(f"\nready in {time.monotonic() - started_at:.1f}s ({what}); kubeconfig (host admin): .local/kubeconfig")
    print("\nTry:")
    print("  export KUBECONFIG=$PWD/.local/kubeconfig PATH=$PWD/.local/bin:$PATH")
    print("  kubectl get apiservice v1alpha1.kosmos.io")
    print("  kubectl apply -f examples/minimal.yaml && kubectl wait vc/dev --for=condition=Ready --timeout=2m")
    print("  kubectl get --raw /apis/kosmos.io/v1alpha1/namespaces/default/virtualclusters/dev/kubeconfig > dev.kubeconfig"
          " && kubectl --kubeconfig dev.kubeconfig get ns")
    if real_nodes:
        print("  kubectl apply -f examples/real-node.yaml   # the real worker, promoted (docs/real-nodes.md)")
        print("  kubectl -n kosmos-system logs deploy/vc-apiserver   # vc-apiserver runs inside the host")


def down() -> None:
    stack().down()
    print("stopped vc-apiserver, its etcd, tenant control planes, real nodes (their state removed) and the host "
          "(data kept in .local; `make clean` removes it)")


def main() -> None:
    parser = argparse.ArgumentParser(prog="playground")
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", "4")))
    parser.add_argument("--real-nodes", type=int, default=int(os.environ.get("REAL_NODES", "0") or 0),
                        help="kubelet + containerd nodes besides the kwok ones (root; hack/realnodes.py)")
    args = parser.parse_args()
    try:
        up(args.nodes, args.real_nodes) if args.command == "up" else down()
    except (FileNotFoundError, TimeoutError, RuntimeError) as e:
        print(f"playground: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
