"""install and uninstall: apply the rendered manifests, then wait for the aggregator's verdict.

Server-side apply under one field manager: re-running install converges instead of failing, and
Secrets are not copied into a last-applied annotation. The aggregator's ``Available`` condition
is the only readiness that matters to users (it is what makes ``kubectl get vc`` work), so that
is what install waits for, echoing the condition as it changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from . import tls
from .kubectl import Kubectl, KubectlError
from .manifests import (
    APISERVICE,
    NAMESPACE,
    SERVICE,
    Manifest,
    Mode,
    apiservice_port,
    identity,
    install_order,
    kustomize,
    render,
    secret_stubs,
    to_yaml,
)

FIELD_MANAGER = "vc-apiserver-installer"
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


def install(kubectl: Kubectl, mode: Mode, cert_dir: Path, port: int | None, image: str | None,
            wait_timeout: float, say: Say) -> None:
    certs = tls.ensure_certs(cert_dir, local=mode == "local")
    say(f"certificates in {cert_dir}")
    objs = render(kubectl, mode, certs, port=port, image=image)
    say(f"applying {len(objs)} objects ({mode} mode)")
    apply(kubectl, objs, say)
    wait_available(kubectl, wait_timeout, say, unavailable_hint(mode, apiservice_port(objs), cert_dir))


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


def uninstall(kubectl: Kubectl, modes: Sequence[Mode], wait_timeout: float, say: Say) -> None:
    """The APIService first: while it is registered but unserved, the host's namespace controller
    cannot finish deleting any namespace, ours included. Then the rest, namespace last."""
    objs = _unique(obj for mode in modes
                   for obj in [*kustomize(kubectl, mode), *(secret_stubs() if mode == "cluster" else [])])
    apiservices = [o for o in objs if o["kind"] == "APIService"]
    rest = list(reversed(install_order(o for o in objs if o["kind"] != "APIService")))
    say(f"deleting APIService {APISERVICE}")
    delete(kubectl, apiservices, wait_timeout, say)
    say(f"deleting {len(rest)} objects (namespace {NAMESPACE} last)")
    delete(kubectl, rest, wait_timeout, say)
    say("uninstalled")
