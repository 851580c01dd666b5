"""Rotation without outage on the production path: a ``pods`` runtime tenant on the real-node lab rolls
its apiserver (a new pod ready before the old one leaves its Service) for each step of a client CA and
a service-account key rotation, while clients call it back to back: not one request fails.

The lab's vc-apiserver runs with a 10 s service-account key overlap (``real_stack``), not the hour
kubelets need, so that a run does not wait it out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.harness import wait_until
from hack.stack import Stack
from reconciler.runtime.pods import COMPONENT, OWNER
from tests.conftest import Kubectl, vc
from tests.support import report
from tests.support.rotation import (
    Caller,
    answers,
    credential_id,
    issued,
    phase,
    reader_token,
    rotate,
    unauthorized,
    with_token,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME = "rot"


@pytest.fixture(scope="module")
def host(real_stack: Stack) -> Iterator[Kubectl]:
    k = Kubectl(real_stack.kubeconfig, host_namespaces=True)
    ns = k.ensure_namespace("real-rotate")
    k.run("create", "-f", "-", input=json.dumps(vc(NAME, ns)))
    k.run("wait", f"vc/{NAME}", "-n", ns, "--for=condition=Ready", "--timeout=240s", timeout=270)
    yield k
    k.run("delete", "vc", "--all", "-n", ns, "--timeout=180s", check=False, timeout=200)
    k.run("delete", "namespace", ns, "--timeout=120s", check=False, timeout=150)


def apiserver_pods(host: Kubectl) -> list[dict[str, object]]:
    return host.json("get", "pods", "-n", "real-rotate", "-l", f"{OWNER}={NAME},{COMPONENT}=apiserver")["items"]


def test_rotations_of_a_real_tenant_fail_no_request_while_its_apiserver_rolls(
        real_stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    ns = "real-rotate"
    first = {p["metadata"]["name"] for p in apiserver_pods(host)}  # type: ignore[index]
    old = issued(host, ns, NAME, tmp_path)
    old_id = credential_id(old)
    with Caller(old) as ca_start:
        ca_prepared = rotate(real_stack.kubeconfig, ns, NAME, "client-ca", "start")
    new = issued(host, ns, NAME, tmp_path)
    with Caller(old) as ca_old, Caller(new) as ca_complete:
        ca_completed = rotate(real_stack.kubeconfig, ns, NAME, "client-ca", "complete")
    assert ca_start.failures == [] and ca_start.ok > 0, ca_start.failures[:3]
    assert ca_complete.failures == [] and ca_complete.ok > 0, ca_complete.failures[:3]
    # the old credential worked until the rotation completed, then was refused, never unanswered
    assert ca_old.ok > 0 and ca_old.refused == ca_old.failures, ca_old.failures[:3]
    wait_until(lambda: unauthorized(old), 10, "the old client CA's credential refused")
    assert answers(new) and old_id not in {c["metadata"]["name"] for c in host.json("get", "vccred", "-n", ns)["items"]}
    # its apiserver pod was replaced (the bundle is in its Secret), and never restarted a container
    rolled = apiserver_pods(host)
    assert first.isdisjoint({p["metadata"]["name"] for p in rolled})  # type: ignore[index]

    admin = issued(host, ns, NAME, tmp_path)
    old_token = reader_token(admin)
    with Caller(with_token(admin, old_token, tmp_path)) as sa_start:
        sa_prepared = rotate(real_stack.kubeconfig, ns, NAME, "service-account-key", "start")
    new_token = reader_token(admin)
    still = with_token(admin, old_token, tmp_path)
    assert answers(still)
    with Caller(with_token(admin, new_token, tmp_path)) as sa_complete:
        sa_completed = rotate(real_stack.kubeconfig, ns, NAME, "service-account-key", "complete")
    assert sa_start.failures == [] and sa_start.ok > 0, sa_start.failures[:3]
    assert sa_complete.failures == [] and sa_complete.ok > 0, sa_complete.failures[:3]
    assert unauthorized(still)
    assert phase(host, ns, NAME, "serviceAccountKey")["phase"] == "Completed"
    restarts = {p["metadata"]["name"]: sum(c.get("restartCount", 0) for c in p["status"]["containerStatuses"])
                for p in host.json("get", "pods", "-n", ns, "-l", f"{OWNER}={NAME}")["items"]}
    assert set(restarts.values()) == {0}, restarts
    admin.run("create", "deployment", "after-rotation", "--image=registry.k8s.io/pause:3.10", "-n", "default")
    admin.run("wait", "deployment/after-rotation", "-n", "default", "--for=jsonpath={.status.replicas}=1",
              "--timeout=60s", timeout=90)
    calls = sum(c.ok for c in (ca_start, ca_old, ca_complete, sa_start, sa_complete))
    report.say(f"rotation on the pods runtime (real-node lab): client CA prepared in {ca_prepared:.1f}s, completed "
               f"in {ca_completed:.1f}s; service-account key prepared in {sa_prepared:.1f}s, completed in "
               f"{sa_completed:.1f}s (overlap 10s); {calls} requests, 0 failed")
