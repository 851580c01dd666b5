"""What rotation tests drive and measure on both runtimes: a client calling the tenant API back to back
through a rotation, kubeconfigs of issued credentials and of service-account tokens, and the rotation
asked for as a user asks (``kubectl vc rotate ... --wait``)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import Kubectl
from tests.e2e.test_kubectl_plugin import kubectl

GV = "/apis/kosmos.io/v1alpha1"
PATH = "/api/v1/namespaces/default/configmaps"  # what every caller reads


@dataclass
class Caller:
    """A client calling the tenant API back to back, with one kubeconfig, until stopped: what fails, how
    often it succeeded, and for how long in all it got no answer (from a failure to the next success)."""

    kubectl: Kubectl
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    down: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def refused(self) -> list[str]:
        """The credential refused (401), as opposed to the apiserver away or still starting (an apiserver
        that has just started may answer 403 until its RBAC cache is filled)."""
        return [f for f in self.failures if "Unauthorized" in f]

    def __enter__(self) -> Caller:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        failing_since: float | None = None
        while not self._stop.is_set():
            asked = time.monotonic()
            result = self.kubectl.run("get", "--raw", PATH, check=False)
            if result.returncode == 0:
                self.ok += 1
                if failing_since is not None:
                    self.down += time.monotonic() - failing_since
                    failing_since = None
            else:
                self.failures.append(result.stderr.strip()[-200:])
                failing_since = asked if failing_since is None else failing_since

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)


def issued(host: Kubectl, ns: str, name: str, tmp_path: Path) -> Kubectl:
    """A kubectl with a credential the kubeconfig subresource issues now."""
    path = tmp_path / f"issued-{time.monotonic_ns()}.kubeconfig"
    path.write_text(host.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/{name}/kubeconfig").stdout)
    return Kubectl(path)


def with_token(tenant: Kubectl, token: str, tmp_path: Path) -> Kubectl:
    """A kubectl of the tenant's server and CA that authenticates with ``token``."""
    config = json.loads(tenant.run("config", "view", "--raw", "-o", "json").stdout)
    config["users"] = [{"name": "token", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "token"
    path = tmp_path / f"token-{time.monotonic_ns()}.kubeconfig"
    path.write_text(json.dumps(config))
    return Kubectl(path)


def reader_token(admin: Kubectl) -> str:
    """A token of ServiceAccount default/reader, which may read what callers read (made the first time)."""
    if admin.run("get", "serviceaccount", "reader", "-n", "default", check=False).returncode != 0:
        admin.run("create", "serviceaccount", "reader", "-n", "default")
        admin.run("create", "role", "reader", "--verb=get,list", "--resource=configmaps", "-n", "default")
        admin.run("create", "rolebinding", "reader", "--role=reader", "--serviceaccount=default:reader",
                  "-n", "default")
    return admin.run("create", "token", "reader", "-n", "default", "--duration=1h").stdout.strip()


def answers(k: Kubectl) -> bool:
    return k.run("get", "--raw", PATH, check=False).returncode == 0


def unauthorized(k: Kubectl) -> bool:
    result = k.run("get", "--raw", PATH, check=False)
    return result.returncode != 0 and "Unauthorized" in result.stderr


def rotate(host_kubeconfig: Path, ns: str, name: str, what: str, step: str, timeout: int = 300) -> float:
    """``kubectl vc rotate NAME WHAT STEP --wait``; the seconds it took."""
    started = time.monotonic()
    done = kubectl(host_kubeconfig, "vc", "rotate", name, what, step, "-n", ns, "--wait", "--timeout", str(timeout),
                   timeout=timeout + 30)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - started


def phase(host: Kubectl, ns: str, name: str, kind: str) -> dict[str, str]:
    status = host.json("get", "vc", name, "-n", ns)["status"]
    rotation: dict[str, str] = status["credentials"]["rotation"][kind]
    return rotation


def credential_id(issued_kubectl: Kubectl) -> str:
    """The id of the credential a kubeconfig holds, as the tenant sees it (its group)."""
    groups = issued_kubectl.json("auth", "whoami")["status"]["userInfo"]["groups"]
    return next(g.removeprefix("kosmos:credential:") for g in groups if g.startswith("kosmos:credential:"))
