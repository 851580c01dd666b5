"""``make up`` / ``make down``: the playground on fixed loopback ports, idempotent."""

from __future__ import annotations

import argparse
import sys

from hack.harness import LOCAL, ApiServer, Etcd, Pki

ETCD_CLIENT_PORT = 32379
ETCD_PEER_PORT = 32380
APISERVER_PORT = 38443
RUN = LOCAL / "run"
LOGS = LOCAL / "log"


def components() -> tuple[Etcd, ApiServer]:
    pki = Pki.ensure(LOCAL / "pki")
    etcd = Etcd(LOCAL / "data" / "etcd", ETCD_CLIENT_PORT, ETCD_PEER_PORT, LOGS / "etcd.log", RUN / "etcd.pid")
    api = ApiServer(pki, etcd.url, APISERVER_PORT, LOGS / "vc-apiserver.log", RUN / "vc-apiserver.pid",
                    extra_args=["--identity", "playground"])
    return etcd, api


def up() -> None:
    etcd, api = components()
    started = []
    if etcd.healthy():
        print(f"etcd          already healthy at {etcd.url}")
    else:
        etcd.stop()
        etcd.start()
        started.append("etcd")
        print(f"etcd          started at {etcd.url} (log {etcd.log})")
    if api.ready():
        print(f"vc-apiserver  already ready at {api.url}")
    else:
        api.stop()
        api.start()
        started.append("vc-apiserver")
        print(f"vc-apiserver  started at {api.url} (log {api.log})")
    kubeconfig = api.kubeconfig(LOCAL / "kubeconfig")
    print(f"\nkubeconfig: {kubeconfig}  ({'started ' + ', '.join(started) if started else 'nothing restarted'})")
    print("\nTry:")
    print("  export KUBECONFIG=$PWD/.local/kubeconfig PATH=$PWD/.local/bin:$PATH")
    print("  kubectl api-resources --api-group=kosmos.io")
    print("  kubectl apply -f ../shared/examples/minimal.yaml   # or any VirtualCluster manifest")
    print("  kubectl get virtualclusters -A -o wide")


def down() -> None:
    etcd, api = components()
    api.stop()
    etcd.stop()
    print("stopped vc-apiserver and etcd (data kept in .local/data; `make clean` removes it)")


def main() -> None:
    parser = argparse.ArgumentParser(prog="playground")
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args()
    try:
        {"up": up, "down": down}[args.command]()
    except (FileNotFoundError, TimeoutError) as e:
        print(f"playground: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
