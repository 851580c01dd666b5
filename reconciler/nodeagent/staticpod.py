"""The node agent as a static pod, and the installer that puts it on a node and takes it off.

Why a static pod: once the agent re-points a kubelet at a tenant, that kubelet runs only the pods the
tenant's apiserver knows; a DaemonSet pod of the host would be killed, and nothing would be left on
the node to make it leave. The kubelet runs the manifests of its static pod directory whatever
apiserver it talks to, so the agent lives there. Static pods cannot mount Secrets or use a
ServiceAccount, so a DaemonSet of the host (``apiservice/deploy/agent``) runs ``install`` on every
node: it copies the agent's TLS files from its Secret into a root-only host directory, writes the
manifest (each only when its content changed, by an atomic rename), and checks again periodically.

It never removes anything when it stops, since it is stopped exactly when its node joins a tenant
(and on every rollout). Removing the agent is a step of its own, ``uninstall``, which refuses while
the node is joined: a node must leave its tenant first, or its kubelet would stay with the tenant
with nothing on the node to bring it back.

  python -m reconciler.nodeagent.staticpod render --image IMAGE --node-name NODE     print the manifest
  python -m reconciler.nodeagent.staticpod install --image IMAGE | --image-from-pod NAMESPACE/POD ...
  python -m reconciler.nodeagent.staticpod uninstall ...

Every path is a host path: the installer's container mounts each host directory at its own path.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from apiserver.machinery import incluster
from reconciler.fileio import remove, write_atomic
from reconciler.nodeagent import CLIENT_CN, DEFAULT_PORT
from reconciler.nodeagent.files import KUBEADM, PRIVATE, PUBLIC, KubeletPaths, stale
from reconciler.nodeagent.state import StateFile

log = logging.getLogger("node-agent-installer")

NAME = NAMESPACE = "kosmos-node-agent"  # the static pod; its mirror pod is kosmos-node-agent-<node>
CONTAINER = "node-agent"
INSTALLER_CONTAINER = "installer"  # the DaemonSet's container, whose image the agent runs
MANIFEST = f"{NAME}.yaml"
MANIFEST_DIR = Path("/etc/kubernetes/manifests")  # the kubelet's staticPodPath (kubeadm's)
TLS_DIR = Path("/etc/kosmos-node-agent")
STATE_DIR = Path("/var/lib/kosmos-node-agent")
SECRET_DIR = Path("/run/secrets/kosmos-node-agent-tls")  # where the installer mounts the Secret
TLS_FILES = {"tls.crt": PUBLIC, "tls.key": PRIVATE, "ca.crt": PUBLIC}  # the Secret's keys, the agent's files
TLS_HASH = "kosmos.io/tls-sha256"  # a new certificate changes the manifest, so the kubelet restarts the agent
KUBELET = KUBEADM
RESTART_COMMAND = "nsenter -t 1 -m -u -i -n -p -- systemctl restart kubelet"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "node-agent",
          "app.kubernetes.io/part-of": "kosmos"}
SETTLE = 60.0  # seconds for the kubelet to notice a removed manifest (20 s at worst) and stop the agent (30 s)


@dataclass(frozen=True)
class AgentPod:
    """What the agent's manifest depends on."""

    image: str
    node_name: str
    port: int = DEFAULT_PORT
    tls_dir: Path = TLS_DIR
    state_dir: Path = STATE_DIR
    kubelet: KubeletPaths = KUBELET
    restart_command: str = RESTART_COMMAND
    restart_timeout: float = 60.0
    tls_hash: str = ""


def _volume_name(path: Path) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", str(path).lower()).strip("-")[:63].rstrip("-") or "root"


def kubelet_dirs(paths: KubeletPaths) -> list[Path]:
    """The directories of the kubelet's files, outermost only. The agent replaces a file by renaming a
    new one over it, so it needs the directory; and only those (never all of /var/lib/kubelet, where
    pod volumes are mounted)."""
    out: list[Path] = []
    for directory in sorted({p.parent for p in paths.all()}, key=lambda d: len(d.parts)):
        if not any(directory.is_relative_to(o) for o in out):
            out.append(directory)
    return out


def agent_args(spec: AgentPod) -> list[str]:
    return [f"--listen=0.0.0.0:{spec.port}",
            f"--tls-cert={spec.tls_dir / 'tls.crt'}", f"--tls-key={spec.tls_dir / 'tls.key'}",
            f"--client-ca={spec.tls_dir / 'ca.crt'}", f"--allowed-client-cn={CLIENT_CN}",
            f"--node-name={spec.node_name}", f"--state-dir={spec.state_dir}",
            f"--kubelet-kubeconfig={spec.kubelet.kubeconfig}", f"--kubelet-ca={spec.kubelet.ca}",
            f"--kubelet-client-cert={spec.kubelet.credential}",
            f"--restart-command={spec.restart_command}", f"--restart-timeout={spec.restart_timeout:g}"]


def manifest(spec: AgentPod) -> dict[str, Any]:
    """The static pod: host network (reached at the node's InternalIP) and PIDs (nsenter -t 1 reaches the
    host's systemd), privileged, and host directories only: its TLS files, its state, the kubelet's files."""
    mounts: list[tuple[str, Path, str, bool]] = [("tls", spec.tls_dir, "Directory", True),
                                                 ("state", spec.state_dir, "DirectoryOrCreate", False)]
    mounts += [(f"kubelet-{_volume_name(d)}"[:63], d, "Directory", False) for d in kubelet_dirs(spec.kubelet)]
    container: dict[str, Any] = {
        "name": CONTAINER, "image": spec.image,
        # The installer's pod pulled this very image on this node: no pull (and no pull Secret) needed.
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "reconciler.nodeagent"], "args": agent_args(spec),
        "ports": [{"name": "https", "containerPort": spec.port, "protocol": "TCP"}],
        # Every request needs the reconciler's client certificate: probes check the port only.
        "readinessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 10},
        "livenessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 20, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"privileged": True},  # nsenter into the host's namespaces
        "volumeMounts": [{"name": name, "mountPath": str(path), **({"readOnly": True} if read_only else {})}
                         for name, path, _, read_only in mounts],
    }
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS),
                     **({"annotations": {TLS_HASH: spec.tls_hash}} if spec.tls_hash else {})},
        "spec": {
            "hostNetwork": True, "hostPID": True, "dnsPolicy": "Default",
            "priorityClassName": "system-node-critical",
            "automountServiceAccountToken": False, "enableServiceLinks": False,  # whichever apiserver
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
            "volumes": [{"name": name, "hostPath": {"path": str(path), "type": kind}}
                        for name, path, kind, _ in mounts],
        },
    }


def render(spec: AgentPod) -> bytes:
    return yaml.safe_dump(manifest(spec), sort_keys=False).encode()


# -- install and uninstall -----------------------------------------------------------------------

def sync_tls(secret_dir: Path, tls_dir: Path) -> tuple[list[Path], str]:
    """Copy the Secret's files into ``tls_dir`` (0700; the key 0600) where they differ. Returns the files
    written and a digest of the three."""
    try:
        wanted = {tls_dir / name: ((secret_dir / name).read_bytes(), mode) for name, mode in TLS_FILES.items()}
    except FileNotFoundError as e:
        raise RuntimeError(f"the agent's Secret lacks {Path(e.filename).name} (mounted at {secret_dir})") from None
    tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tls_dir, 0o700)
    changed = stale(wanted)
    for path in changed:
        write_atomic(path, *wanted[path])
    digest = hashlib.sha256()
    for path, (data, _) in sorted(wanted.items()):
        digest.update(f"{path.name}:{len(data)}:".encode() + data)
    return changed, digest.hexdigest()


def write_manifest(manifest_dir: Path, data: bytes) -> bool:
    """Write the manifest when it differs; the temporary file is a dotfile, which the kubelet ignores."""
    if not manifest_dir.is_dir():
        raise RuntimeError(f"{manifest_dir} does not exist: is it the kubelet's staticPodPath?")
    path = manifest_dir / MANIFEST
    if not stale({path: (data, PRIVATE)}):
        return False
    write_atomic(path, data, PRIVATE)
    return True


def install(spec: AgentPod, secret_dir: Path, manifest_dir: Path) -> list[Path]:
    """TLS files first, then the manifest that names them. Returns what was written."""
    changed, digest = sync_tls(secret_dir, spec.tls_dir)
    if write_manifest(manifest_dir, render(replace(spec, tls_hash=digest))):
        changed.append(manifest_dir / MANIFEST)
    return changed


def joined_to(state_dir: Path) -> str | None:
    joined = StateFile(state_dir / "state.json").load()
    return joined.virtual_cluster if joined is not None else None


def uninstall(manifest_dir: Path, tls_dir: Path, state_dir: Path, settle: float = SETTLE) -> str | None:
    """Remove the manifest (the kubelet stops the agent), then the TLS files; None once done, else why not.

    Refused while the node is joined. A join that the agent was serving while it stopped completes
    before it exits, so after ``settle`` seconds the state is read again: joined now, the manifest is
    put back and the node must leave first. The directories stay, empty (each is a mount point of the
    installer's container)."""
    tenant = joined_to(state_dir)
    if tenant is not None:
        return f"the node is joined to virtual cluster {tenant}: it must leave it first"
    path = manifest_dir / MANIFEST
    if path.exists():
        previous = path.read_bytes()
        remove(path)
        log.info("removed %s: the kubelet stops the agent", path)
        time.sleep(settle)
        tenant = joined_to(state_dir)
        if tenant is not None:
            write_atomic(path, previous, PRIVATE)
            return f"the node joined virtual cluster {tenant} while the agent stopped: the agent is back"
    for child in sorted(tls_dir.iterdir()) if tls_dir.is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            remove(child)
        log.info("removed %s", child)
    return None


# -- the installer's image -------------------------------------------------------------------------

async def pod_image(client: Any, namespace: str, name: str, container: str = INSTALLER_CONTAINER) -> str:
    """The image of one container of a pod: the agent runs the image its installer runs, as the
    DaemonSet names it (so kustomize ``images:`` and the installer's ``--image`` reach both)."""
    pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    for c in pod["spec"]["containers"]:
        if c["name"] == container:
            return str(c["image"])
    raise LookupError(f"pod {namespace}/{name} has no container {container}")


class InClusterApi:
    """All the installer asks of its cluster's API: a GET, as the pod's service account (where the server
    and the credential are is :mod:`apiserver.machinery.incluster`'s), the token read for each. A failure
    reads as the host client's: ``CODE Reason: message``, or the server, the request and what broke."""

    user_agent = "kosmos-node-agent-installer"
    timeout = aiohttp.ClientTimeout(total=10.0, sock_connect=3)

    async def get(self, path: str) -> Any:
        server = incluster.server_url()
        sslctx = ssl.create_default_context(cafile=str(incluster.CA_FILE))
        headers = {"User-Agent": self.user_agent, "Accept": "application/json",
                   "Authorization": f"Bearer {incluster.TOKEN_FILE.read_text().strip()}"}
        try:
            async with (aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=sslctx), headers=headers) as session,
                        session.get(server + path, timeout=self.timeout) as resp):
                status, answer = resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise ConnectionError(f"{server}: GET {path}: {type(e).__name__}: {e}") from e
        try:
            decoded = orjson.loads(answer) if answer else {}
        except orjson.JSONDecodeError:
            decoded = {"message": answer.decode(errors="replace")[:500]}
        if status >= 400:
            failure = decoded if isinstance(decoded, dict) else {"message": str(decoded)}
            reason, message = failure.get("reason", ""), failure.get("message") or f"HTTP {status}"
            raise LookupError(f"{status} {reason}: {message}")
        return decoded


def image_from_pod(reference: str) -> str:
    namespace, _, name = reference.partition("/")
    return asyncio.run(pod_image(InClusterApi(), namespace, name))


# -- the command ---------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reconciler.nodeagent.staticpod", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def paths(q: argparse.ArgumentParser) -> None:
        q.add_argument("--tls-dir", type=Path, default=TLS_DIR, help="the agent's TLS files (default %(default)s)")
        q.add_argument("--state-dir", type=Path, default=STATE_DIR,
                       help="the agent's join state (default %(default)s)")

    def agent(q: argparse.ArgumentParser) -> None:
        paths(q)
        q.add_argument("--node-name", default=os.environ.get("NODE_NAME") or socket.gethostname(),
                       help="this node (default $NODE_NAME, else the hostname)")
        q.add_argument("--port", type=int, default=DEFAULT_PORT, help="the agent's port (default %(default)s)")
        q.add_argument("--kubelet-kubeconfig", type=Path, default=KUBELET.kubeconfig, help="default %(default)s")
        q.add_argument("--kubelet-ca", type=Path, default=KUBELET.ca, help="default %(default)s")
        q.add_argument("--kubelet-client-cert", type=Path, default=KUBELET.credential, help="default %(default)s")
        q.add_argument("--restart-command", default=RESTART_COMMAND, help="default %(default)r")
        q.add_argument("--restart-timeout", type=float, default=60.0, help="seconds (default %(default)s)")

    def looping(q: argparse.ArgumentParser) -> None:
        q.add_argument("--manifest-dir", type=Path, default=MANIFEST_DIR,
                       help="the kubelet's static pod directory (default %(default)s)")
        q.add_argument("--once", action="store_true", help="one pass, then exit (1 if it did not succeed)")
        q.add_argument("--resync", type=float, default=60.0, help="seconds between passes (default %(default)s)")
        q.add_argument("--ready-file", type=Path, help="present exactly while the last pass succeeded")
        q.add_argument("-v", "--v", type=int, default=1, help="log verbosity (0-4)")

    render_p = sub.add_parser("render", help="print the agent's static pod manifest")
    agent(render_p)
    render_p.add_argument("--image", required=True)

    install_p = sub.add_parser("install", help="keep the agent's TLS files and static pod on this node")
    agent(install_p)
    looping(install_p)
    image = install_p.add_mutually_exclusive_group(required=True)
    image.add_argument("--image", help="the agent's image")
    image.add_argument("--image-from-pod", metavar="NAMESPACE/POD",
                       help=f"the image of this pod's {INSTALLER_CONTAINER!r} container (in-cluster API)")
    install_p.add_argument("--secret-dir", type=Path, default=SECRET_DIR,
                           help="the mounted Secret: tls.crt, tls.key, ca.crt (default %(default)s)")

    uninstall_p = sub.add_parser("uninstall", help="remove the agent from this node, unless it is joined")
    paths(uninstall_p)
    looping(uninstall_p)
    uninstall_p.add_argument("--settle", type=float, default=SETTLE,
                             help="seconds the kubelet gets to stop the agent (default %(default)s)")
    return p.parse_args(argv)


def spec_from(args: argparse.Namespace, image: str) -> AgentPod:
    return AgentPod(image, args.node_name, args.port, args.tls_dir.absolute(), args.state_dir.absolute(),
                    KubeletPaths(args.kubelet_kubeconfig.absolute(), args.kubelet_ca.absolute(),
                                 args.kubelet_client_cert.absolute()),
                    args.restart_command, args.restart_timeout)


def loop(step: Callable[[], bool], args: argparse.Namespace) -> int:
    """Run ``step`` every ``--resync`` seconds until SIGTERM, the ready file tracking its success.
    Stopping touches nothing on the node."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.ready_file is not None:
        args.ready_file.unlink(missing_ok=True)  # an emptyDir outlives a container restart
    while True:
        try:
            ok = step()
        except Exception as e:  # one line to the log, and try again
            log.error("%s", e)
            ok = False
        if args.ready_file is not None:
            if ok:
                args.ready_file.parent.mkdir(parents=True, exist_ok=True)
                args.ready_file.touch()
            else:
                args.ready_file.unlink(missing_ok=True)
        if args.once:
            return 0 if ok else 1
        if stop.wait(args.resync if ok else min(args.resync, 10.0)):
            return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "render":
        sys.stdout.write(render(spec_from(args, args.image)).decode())
        return 0
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.v, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    if args.command == "install":
        image = args.image
        passes = 0

        def install_step() -> bool:
            nonlocal image, passes
            if image is None:
                image = image_from_pod(args.image_from_pod)
                log.info("the agent runs %s", image)
            written = install(spec_from(args, image), args.secret_dir, args.manifest_dir)
            for path in written:
                log.info("wrote %s", path)
            if not written and passes == 0:
                log.info("the node agent's files in %s and %s are up to date", args.tls_dir,
                         args.manifest_dir / MANIFEST)
            passes += 1
            return True

        return loop(install_step, args)

    def uninstall_step() -> bool:
        reason = uninstall(args.manifest_dir, args.tls_dir, args.state_dir, args.settle)
        if reason is not None:
            log.warning("not removing the node agent: %s", reason)
        return reason is None

    return loop(uninstall_step, args)


if __name__ == "__main__":
    sys.exit(main())
