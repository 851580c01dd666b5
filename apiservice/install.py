"""install and uninstall: apply the rendered manifests, then wait for the aggregator's verdict.

Server-side apply under one field manager: re-running install converges instead of failing, and
Secrets are not copied into a last-applied annotation. The aggregator's ``Available`` condition
is what makes ``kubectl get vc`` work, so install waits for it first, echoing the condition as it
changes. It turns True as soon as one server answers; install then waits, within the same deadline,
until every replica of the server's own Deployments and StatefulSets has rolled out, so that an
installation reported done serves at the capacity and with the redundancy it was asked for.

The node agent (``--node-joiner agent``) outlives its DaemonSet by design (it runs as a static pod,
see ``reconciler/nodeagent/staticpod.py``), so uninstall retires it first: it refuses while host
nodes are promoted into VirtualClusters (their kubelets may serve a tenant), switches the DaemonSet
to ``deploy/agent-uninstall`` and waits until every node has removed its agent.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from . import tls
from .kubectl import Kubectl, KubectlError
from .manifests import (
    AGENT_DAEMONSET,
    AGENT_NAMESPACE,
    APISERVICE,
    ENCRYPTION_SECRET,
    NAMESPACE,
    SERVICE,
    Joiner,
    Manifest,
    Mode,
    apiservice_port,
    directories,
    identity,
    install_order,
    kustomize,
    render,
    secret_stubs,
    to_yaml,
)

FIELD_MANAGER = "vc-apiserver-installer"
CLAIM_LABEL = "kosmos.io/virtualcluster"  # reconciler.nodes.selection.CLAIM_LABEL: a host node promoted into a tenant
Say = Callable[[str], None]


class InstallError(Exception):
    """A failure worth one clear line to the user (no traceback)."""


def apply(kubectl: Kubectl, objs: Sequence[Manifest], say: Say) -> None:
    try:
        out = kubectl.run("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                          "-f", "-", input=to_yaml(objs)).stdout
    except KubectlError as e:
        raise InstallError(f"applying the manifests failed: {e.stderr}") from None
    for line in out.splitlines():
        say(f"  {line}")


def available_condition(apiservice: Manifest | None) -> dict[str, Any] | None:
    for cond in ((apiservice or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Available":
            return dict(cond)
    return None


def describe(cond: dict[str, Any] | None) -> str:
    if cond is None:
        return "no Available condition reported yet"
    return f"Available={cond.get('status')} ({cond.get('reason', '')}): {cond.get('message', '')}"


def wait_available(kubectl: Kubectl, timeout: float, say: Say, hint: str = "", interval: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        cond = available_condition(kubectl.get("apiservice", APISERVICE))
        if cond is not None and cond.get("status") == "True":
            say(f"APIService {APISERVICE} is Available")
            return
        state = describe(cond)
        if state != last:
            say(f"waiting for APIService {APISERVICE}: {state}")
            last = state
        if time.monotonic() >= deadline:
            raise InstallError(f"APIService {APISERVICE} is not Available after {timeout:g}s: {state}"
                               + (f"\n{hint}" if hint else ""))
        time.sleep(interval)


def unavailable_hint(mode: Mode, port: int, cert_dir: Path) -> str:
    if mode == "local":
        return (f"The aggregator dials localhost:{port} and verifies {SERVICE}.{NAMESPACE}.svc against "
                f"{cert_dir / 'ca.crt'}: is vc-apiserver serving there with {cert_dir / 'serving.crt'}, "
                f"--authentication-kubeconfig and --authorization-kubeconfig (user "
                f"system:serviceaccount:{NAMESPACE}:{SERVICE})?")
    return (f"See `kubectl -n {NAMESPACE} get pods,endpointslices` and "
            f"`kubectl -n {NAMESPACE} logs deploy/vc-apiserver`.")


def check_encryption_key(kubectl: Kubectl, objs: Sequence[Manifest]) -> None:
    """Never replace the key of the stored tenant keys: with another one they are unreadable."""
    wanted = next((o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == ENCRYPTION_SECRET), None)
    if wanted is None:
        return
    current = kubectl.get("secret", ENCRYPTION_SECRET, "-n", NAMESPACE)
    if current is not None and current.get("data") != wanted["data"]:
        raise InstallError(
            f"Secret {NAMESPACE}/{ENCRYPTION_SECRET} holds another key than {tls.ENCRYPTION_KEY} in the certificate "
            "directory; replacing it would make every stored tenant key unreadable. Use the certificate directory "
            "of the existing installation, or copy the key from the Secret into it.")


def install(kubectl: Kubectl, mode: Mode, cert_dir: Path, port: int | None, image: str | None,
            wait_timeout: float, say: Say, joiner: Joiner = "kwok", overlay: Path | None = None) -> None:
    certs = tls.ensure_certs(cert_dir, local=mode == "local", node_agent=joiner == "agent")
    say(f"certificates in {cert_dir}")
    objs = render(kubectl, mode, certs, port=port, image=image, joiner=joiner, overlay=overlay)
    check_encryption_key(kubectl, objs)
    say(f"applying {len(objs)} objects ({mode} mode{', node agent' if joiner == 'agent' else ''}"
        f"{f', overlay {overlay}' if overlay else ''})")
    apply(kubectl, objs, say)
    deadline = time.monotonic() + wait_timeout
    wait_available(kubectl, wait_timeout, say, unavailable_hint(mode, apiservice_port(objs), cert_dir))
    wait_rolled_out(kubectl, objs, deadline, say)


def wait_rolled_out(kubectl: Kubectl, objs: Iterable[Manifest], deadline: float, say: Say) -> None:
    """Every replica of the installation's Deployments and StatefulSets updated and ready by ``deadline``
    (``kubectl rollout status`` reads the same fields the controllers write)."""
    for obj in objs:
        meta = obj.get("metadata") or {}
        if obj.get("kind") not in ("Deployment", "StatefulSet") or meta.get("namespace") != NAMESPACE:
            continue
        what = f"{obj['kind'].lower()}/{meta['name']}"
        left = max(deadline - time.monotonic(), 1.0)
        try:
            kubectl.run("rollout", "status", what, "-n", NAMESPACE, f"--timeout={left:.0f}s", timeout=left + 30)
        except KubectlError as e:
            raise InstallError(f"{what} has not rolled out: {e.stderr.strip()}\nSee `kubectl -n {NAMESPACE} get "
                               f"pods` and `kubectl -n {NAMESPACE} describe {what}`.") from None
        except subprocess.TimeoutExpired:
            raise InstallError(f"{what} has not rolled out: kubectl rollout status did not answer") from None
        say(f"{what} rolled out")


def _unique(objs: Iterable[Manifest]) -> list[Manifest]:
    seen: dict[tuple[str, str, str, str], Manifest] = {}
    for obj in objs:
        seen.setdefault(identity(obj), obj)
    return list(seen.values())


def delete(kubectl: Kubectl, objs: Sequence[Manifest], timeout: float, say: Say) -> None:
    if not objs:
        return
    try:
        out = kubectl.run("delete", "-f", "-", "--ignore-not-found", "--wait", f"--timeout={timeout:g}s",
                          input=to_yaml(objs), timeout=timeout + 30).stdout
    except KubectlError as e:
        raise InstallError(f"deleting failed: {e.stderr}") from None
    for line in out.splitlines():
        say(f"  {line}")


def retire_node_agents(kubectl: Kubectl, timeout: float, say: Say) -> None:
    """Remove the agents from the nodes before their DaemonSet goes, or fail saying why not."""
    if kubectl.get("daemonset", AGENT_DAEMONSET, "-n", AGENT_NAMESPACE) is None:
        return
    promoted = kubectl.run("get", "nodes", "-l", CLAIM_LABEL, "-o", "name").stdout.split()
    if promoted:
        raise InstallError(
            f"{len(promoted)} host node(s) are promoted into VirtualClusters ({', '.join(promoted)}): their kubelets "
            "may serve a tenant, and only the node agent brings them back. Release them first (remove "
            "spec.promoteResources or delete their VirtualClusters) and uninstall again.")
    say(f"removing the node agent from every node (DaemonSet {AGENT_NAMESPACE}/{AGENT_DAEMONSET})")
    apply(kubectl, kustomize(kubectl, "agent-uninstall"), say)
    try:
        kubectl.run("rollout", "status", f"daemonset/{AGENT_DAEMONSET}", "-n", AGENT_NAMESPACE,
                    f"--timeout={timeout:g}s", timeout=timeout + 30)
    except KubectlError as e:
        raise InstallError(
            f"the node agent was not removed from every node: {e.stderr}\nSee `kubectl -n {AGENT_NAMESPACE} logs "
            "-l app.kubernetes.io/component=node-agent-installer`: a node still joined to a tenant keeps its agent "
            "until it leaves.") from None


def uninstall(kubectl: Kubectl, modes: Sequence[Mode], wait_timeout: float, say: Say) -> None:
    """The node agents first, if any (see the module's docstring). Then the APIService: while it is
    registered but unserved, the host's namespace controller cannot finish deleting any namespace, ours
    included. Then the rest, namespaces last."""
    objs = _unique(obj for mode in modes for directory in directories(mode, "agent")
                   for obj in kustomize(kubectl, directory))
    objs = _unique([*objs, *secret_stubs()])
    retire_node_agents(kubectl, wait_timeout, say)
    apiservices = [o for o in objs if o["kind"] == "APIService"]
    rest = list(reversed(install_order(o for o in objs if o["kind"] != "APIService")))
    say(f"deleting APIService {APISERVICE}")
    delete(kubectl, apiservices, wait_timeout, say)
    say(f"deleting {len(rest)} objects (namespaces {NAMESPACE} and {AGENT_NAMESPACE} last)")
    delete(kubectl, rest, wait_timeout, say)
    say("uninstalled")
