"""A kubelet stand-in for tests: it reads exactly the kubeconfig a kubelet would and keeps its Node Ready.

``run`` loads the kubeconfig once at start, as the kubelet does (server, CA, client certificate and
key, inline or by path), says who it is (SelfSubjectReview), registers the Node (an existing one is
kept, as the kubelet keeps it) and heartbeats: the Ready condition in the Node's status and the node
Lease in kube-node-lease. It uses only what a kubelet's credential may do, so the apiserver's Node
authorizer and NodeRestriction judge it as they would judge a kubelet.

``restart`` is what a node agent's restart command runs in tests: stop the stand-in named by the pid
file, start a new detached one on the current files, and fail if it does not come up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient

REPO = Path(__file__).resolve().parent.parent
LEASE_SECONDS = 40
LOADED = "kubeconfig loaded, server"  # the line restart waits for
log = logging.getLogger("kubelet-standin")


def _now(micro: bool = False) -> str:
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def node_status(args: argparse.Namespace) -> dict[str, Any]:
    resources = {"cpu": args.cpu, "memory": args.memory, "pods": args.pods}
    now = _now()
    return {"capacity": resources, "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": args.address},
                          {"type": "Hostname", "address": args.node_name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet stand-in is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": args.started}],
            "nodeInfo": {"kubeletVersion": "v0.0.0-standin", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "standin://0", "kernelVersion": "",
                         "osImage": "kubelet stand-in", "machineID": "", "systemUUID": "", "bootID": ""}}


async def register(client: KubeClient, args: argparse.Namespace) -> None:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": args.node_name, "labels": {"kubernetes.io/hostname": args.node_name,
                                                            "kubernetes.io/os": "linux",
                                                            "kubernetes.io/arch": "amd64"}},
            "status": node_status(args)}
    try:
        await client.create("/api/v1/nodes", node)
        log.info("registered node %s at %s", args.node_name, client.server)
    except HostError as e:
        if e.code != 409:
            raise
        log.info("node %s already registered at %s", args.node_name, client.server)


async def heartbeat(client: KubeClient, args: argparse.Namespace) -> None:
    await client.patch(f"/api/v1/nodes/{args.node_name}/status", {"status": node_status(args)})
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{args.node_name}"
    spec = {"holderIdentity": args.node_name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _now(True)}
    try:
        lease = await client.get(path)
    except HostError as e:
        if e.code != 404:
            raise
        await client.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": args.node_name, "namespace": "kube-node-lease"}, "spec": spec})
        return
    lease["spec"].update(spec)
    await client.request("PUT", path, body=lease)


async def run(args: argparse.Namespace) -> None:
    client = KubeClient.from_kubeconfig(args.kubeconfig, user_agent=f"kubelet-standin/{args.node_name}")
    log.info("%s %s", LOADED, client.server)
    args.started = _now()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set():
            try:
                review = await client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                             {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
                user = review["status"]["userInfo"]
                log.info("authenticated to %s as %s (groups %s)", client.server, user["username"],
                         ",".join(user.get("groups", [])))
                await register(client, args)
                break
            except (HostError, HostUnavailable) as e:
                log.warning("registration failed, retrying: %s", e)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        while not stop.is_set():
            try:
                await heartbeat(client, args)
            except (HostError, HostUnavailable) as e:
                log.warning("heartbeat failed: %s", e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.heartbeat)
    finally:
        await client.close()


def _ours(pid: int) -> bool:
    try:
        return b"hack.kubelet_standin" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stop_previous(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return
    if not pid or not _ours(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _ours(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _ours(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def restart(args: argparse.Namespace, run_args: list[str]) -> int:
    pidfile = Path(args.pidfile)
    stop_previous(pidfile)
    log_path = Path(args.log) if args.log else pidfile.with_suffix(".log")
    offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hack.kubelet_standin", "run", *run_args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    pidfile.write_text(str(proc.pid))
    # Done once the new stand-in has read its files (they may change right after); one that cannot
    # even load its kubeconfig fails the restart.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"kubelet stand-in exited with {proc.returncode}; see {log_path}", file=sys.stderr)
            return 1
        if LOADED.encode() in log_path.read_bytes()[offset:]:
            print(f"kubelet stand-in for {args.node_name} started (pid {proc.pid})")
            return 0
        time.sleep(0.05)
    print(f"kubelet stand-in did not load its kubeconfig within 30s; see {log_path}", file=sys.stderr)
    return 1


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    node = argparse.ArgumentParser(add_help=False)
    node.add_argument("--kubeconfig", required=True, help="the kubelet's kubeconfig")
    node.add_argument("--node-name", required=True)
    node.add_argument("--address", default="127.0.0.1", help="the node's InternalIP")
    node.add_argument("--cpu", default="4")
    node.add_argument("--memory", default="8Gi")
    node.add_argument("--pods", default="110")
    node.add_argument("--heartbeat", type=float, default=2.0, help="seconds between heartbeats")
    p = argparse.ArgumentParser(prog="python -m hack.kubelet_standin", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("run", parents=[node], help="register the node and keep it Ready")
    again = sub.add_parser("restart", parents=[node], help="stop the running stand-in, start a new one")
    again.add_argument("--pidfile", required=True)
    again.add_argument("--log", help="log of the new stand-in (default: beside the pid file)")
    args = p.parse_args(argv)
    run_args = [f"--kubeconfig={args.kubeconfig}", f"--node-name={args.node_name}", f"--address={args.address}",
                f"--cpu={args.cpu}", f"--memory={args.memory}", f"--pods={args.pods}", f"--heartbeat={args.heartbeat}"]
    return args, run_args


def main(argv: list[str] | None = None) -> int:
    args, run_args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    if args.command == "restart":
        return restart(args, run_args)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
