"""Rotation without outage: a tenant's client CA and service-account key are replaced in two phases
(``kubectl vc rotate NAME client-ca|service-account-key start``, then ``complete``) while clients call
the tenant API the whole time; credentials of the old CA or key work until ``complete`` and not after.

Behind a real host, with a process-runtime tenant; the overlap of the service-account key is cut to
seconds (``--service-account-key-rotation-overlap``) so that a run does not wait the production hour."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hack.stack import Stack
from tests.conftest import Kubectl, running_stack, vc
from tests.e2e.test_kubectl_plugin import kubectl
from tests.support import report

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
NS = "rotate"
OVERLAP = 5  # seconds the old service-account key verifies after the new one signs (the server's flag)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from running_stack(tmp_path_factory.mktemp("rotation"), nodes=1, runtime="process",
                             extra_args=["--service-account-key-rotation-overlap", str(OVERLAP)])


@pytest.fixture(scope="module")
def host(stack: Stack) -> Kubectl:
    k = Kubectl(stack.kubeconfig, host_namespaces=True)
    k.ensure_namespace(NS)
    k.run("create", "-f", "-", input=json.dumps(vc("dev", NS)))
    k.run("wait", "vc/dev", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=150)
    return k


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
            result = self.kubectl.run("get", "--raw", "/api/v1/namespaces/default/configmaps", check=False)
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


def issued(host: Kubectl, tmp_path: Path) -> Kubectl:
    path = tmp_path / f"issued-{time.monotonic_ns()}.kubeconfig"
    path.write_text(host.run("get", "--raw", f"{GV}/namespaces/{NS}/virtualclusters/dev/kubeconfig").stdout)
    return Kubectl(path)


def with_token(tenant: Kubectl, token: str, tmp_path: Path) -> Kubectl:
    """A kubeconfig of the tenant's server and CA that authenticates with ``token``."""
    config = json.loads(tenant.run("config", "view", "--raw", "-o", "json").stdout)
    config["users"] = [{"name": "token", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "token"
    path = tmp_path / f"token-{time.monotonic_ns()}.kubeconfig"
    path.write_text(json.dumps(config))
    return Kubectl(path)


def rotate(stack: Stack, what: str, step: str) -> float:
    started = time.monotonic()
    done = kubectl(stack.kubeconfig, "vc", "rotate", "dev", what, step, "-n", NS, "--wait", "--timeout", "120")
    assert done.returncode == 0, done.stderr
    return time.monotonic() - started


def phase(host: Kubectl, kind: str) -> dict[str, str]:
    status = host.json("get", "vc", "dev", "-n", NS)["status"]
    return status["credentials"]["rotation"][kind]


def test_a_client_ca_rotation_keeps_every_credential_working_until_complete_then_only_new_ones(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    old = issued(host, tmp_path)
    with Caller(old) as before:
        prepared = rotate(stack, "client-ca", "start")
        new = issued(host, tmp_path)
        with Caller(new) as after:
            time.sleep(2)
    assert before.failures == [] and before.ok > 0, before.failures[:3]
    assert after.failures == [] and after.ok > 0, after.failures[:3]
    state = phase(host, "clientCA")
    assert state["phase"] == "Prepared" and state["lastInitiationFinishedTime"] >= state["lastInitiationTime"]
    old_issuer = old.json("config", "view", "--raw", "-o", "json")["users"][0]["user"]["client-certificate-data"]
    new_issuer = new.json("config", "view", "--raw", "-o", "json")["users"][0]["user"]["client-certificate-data"]
    assert old_issuer != new_issuer

    with Caller(new) as during:
        completed = rotate(stack, "client-ca", "complete")
    assert during.failures == [] and during.ok > 0, during.failures[:3]
    refused = old.run("get", "--raw", "/api/v1/namespaces/default", check=False)
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr, refused.stderr
    assert new.run("get", "--raw", "/api/v1/namespaces/default", check=False).returncode == 0
    assert phase(host, "clientCA")["phase"] == "Completed"
    events = host.run("get", "events", "-n", NS, "--field-selector", "involvedObject.name=dev").stdout
    assert "RotationPrepared" in events and "RotationCompleted" in events
    report.say(f"rotation: client_ca prepared_s = {prepared:.1f}, completed_s = {completed:.1f}, requests "
               f"{before.ok + after.ok + during.ok} with 0 failed")


def test_a_service_account_key_rotation_keeps_live_tokens_working_through_the_overlap(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    admin = issued(host, tmp_path)
    admin.run("create", "serviceaccount", "reader", "-n", "default")
    admin.run("create", "clusterrolebinding", "reader-view", "--clusterrole=view",
              "--serviceaccount=default:reader")
    old_token = admin.run("create", "token", "reader", "-n", "default", "--duration=1h").stdout.strip()
    with Caller(with_token(admin, old_token, tmp_path)) as before:
        prepared = rotate(stack, "service-account-key", "start")
        time.sleep(1)
    # the old token was never refused; the process runtime's apiserver was away while it restarted
    assert before.refused == [] and before.ok > 0, before.refused[:3]
    new_token = admin.run("create", "token", "reader", "-n", "default", "--duration=1h").stdout.strip()
    assert new_token.split(".")[0] != old_token.split(".")[0] or new_token != old_token
    assert phase(host, "serviceAccountKey")["phase"] == "Prepared"
    old_still = with_token(admin, old_token, tmp_path)
    assert old_still.run("get", "--raw", "/api/v1/namespaces/default", check=False).returncode == 0

    with Caller(with_token(admin, new_token, tmp_path)) as during:
        completed = rotate(stack, "service-account-key", "complete")
        time.sleep(1)
    assert during.refused == [] and during.ok > 0, during.refused[:3]
    refused = old_still.run("get", "--raw", "/api/v1/namespaces/default", check=False)
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr, refused.stderr
    assert phase(host, "serviceAccountKey")["phase"] == "Completed"
    # the tenant's own controllers never saw a 401: their tokens were made again when the key changed
    logs = stack.root / "tenants" / NS / "dev" / "logs" / "kube-controller-manager.log"
    assert "Unauthorized" not in logs.read_text(errors="replace")
    admin.run("create", "deployment", "after-rotation", "--image=registry.k8s.io/pause:3.10", "-n", "default")
    admin.run("wait", "deployment/after-rotation", "-n", "default", "--for=jsonpath={.status.replicas}=1",
              "--timeout=60s", timeout=90)
    report.say(f"rotation: service_account_key (process runtime) prepared_s = {prepared:.1f}, completed_s = "
               f"{completed:.1f} (overlap {OVERLAP}s); tokens refused: 0; apiserver away while it restarted: "
               f"{before.down:.1f}s preparing, {during.down:.1f}s completing")
