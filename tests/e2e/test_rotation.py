"""Rotation without outage: a tenant's client CA and service-account key are replaced in two phases
(``kubectl vc rotate NAME client-ca|service-account-key start``, then ``complete``) while clients call
the tenant API the whole time; credentials of the old CA or key work until ``complete`` and not after.

Behind a real host, with a process-runtime tenant (the real-node lab's ``pods`` runtime:
test_real_rotation.py). The overlap of the service-account key is cut to seconds
(``--service-account-key-rotation-overlap``) so that a run does not wait the production hour."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.stack import Stack
from tests.conftest import Kubectl, running_stack, vc
from tests.e2e.test_kubectl_plugin import kubectl
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

pytestmark = pytest.mark.e2e

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


def test_a_client_ca_rotation_keeps_every_credential_working_until_complete_then_only_new_ones(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    old = issued(host, NS, "dev", tmp_path)
    old_id = credential_id(old)
    with Caller(old) as before:
        prepared = rotate(stack.kubeconfig, NS, "dev", "client-ca", "start")
        new = issued(host, NS, "dev", tmp_path)
        with Caller(new) as after:
            time.sleep(2)
    assert before.failures == [] and before.ok > 0, before.failures[:3]
    assert after.failures == [] and after.ok > 0, after.failures[:3]
    state = phase(host, NS, "dev", "clientCA")
    assert state["phase"] == "Prepared" and state["lastInitiationFinishedTime"] >= state["lastInitiationTime"]

    with Caller(new) as during:
        completed = rotate(stack.kubeconfig, NS, "dev", "client-ca", "complete")
    assert during.failures == [] and during.ok > 0, during.failures[:3]
    assert unauthorized(old) and answers(new)
    assert phase(host, NS, "dev", "clientCA")["phase"] == "Completed"
    # what the old CA issued is listed no more: the credential objects went with it
    left = {c["metadata"]["name"] for c in host.json("get", "vccred", "-n", NS)["items"]}
    assert old_id not in left and credential_id(new) in left
    again = kubectl(stack.kubeconfig, "vc", "rotate", "dev", "client-ca", "complete", "-n", NS)
    assert again.returncode != 0 and again.stderr.strip().splitlines() == [
        'error: virtualcluster "dev": its client-ca rotation is Completed; only a Prepared one can be completed']
    events = host.run("get", "events", "-n", NS, "--field-selector", "involvedObject.name=dev").stdout
    assert "RotationPrepared" in events and "RotationCompleted" in events
    report.say(f"rotation: client CA (process runtime) prepared in {prepared:.1f}s, completed in {completed:.1f}s; "
               f"{before.ok + after.ok + during.ok} requests, 0 failed")


def test_a_service_account_key_rotation_keeps_live_tokens_working_through_the_overlap(
        stack: Stack, host: Kubectl, tmp_path: Path) -> None:
    admin = issued(host, NS, "dev", tmp_path)
    old_token = reader_token(admin)
    with Caller(with_token(admin, old_token, tmp_path)) as before:
        prepared = rotate(stack.kubeconfig, NS, "dev", "service-account-key", "start")
        time.sleep(1)
    # the old token was never refused; the process runtime's apiserver was away while it restarted
    assert before.refused == [] and before.ok > 0, before.failures[:3]
    assert phase(host, NS, "dev", "serviceAccountKey")["phase"] == "Prepared"
    new_token = reader_token(admin)
    old_still = with_token(admin, old_token, tmp_path)
    assert answers(old_still)

    with Caller(with_token(admin, new_token, tmp_path)) as during:
        completed = rotate(stack.kubeconfig, NS, "dev", "service-account-key", "complete")
        time.sleep(1)
    assert during.refused == [] and during.ok > 0, during.failures[:3]
    assert unauthorized(old_still)
    assert phase(host, NS, "dev", "serviceAccountKey")["phase"] == "Completed"
    # the tenant's own controllers never saw a 401: their tokens were made again when the key changed
    logs = stack.root / "tenants" / NS / "dev" / "logs" / "kube-controller-manager.log"
    assert "Unauthorized" not in logs.read_text(errors="replace")
    admin.run("create", "deployment", "after-rotation", "--image=registry.k8s.io/pause:3.10", "-n", "default")
    admin.run("wait", "deployment/after-rotation", "-n", "default", "--for=jsonpath={.status.replicas}=1",
              "--timeout=60s", timeout=90)
    report.say(f"rotation: service-account key (process runtime) prepared in {prepared:.1f}s, completed in "
               f"{completed:.1f}s (overlap {OVERLAP}s); tokens refused: 0; the apiserver was away while it "
               f"restarted: {before.down:.1f}s preparing, {during.down:.1f}s completing")


def test_a_rotation_request_that_is_not_a_time_is_refused_naming_the_annotation(host: Kubectl) -> None:
    before = host.json("get", "vc", "dev", "-n", NS)["metadata"].get("annotations")
    bad = host.run("annotate", "vc", "dev", "-n", NS, "kosmos.io/client-ca-rotation-start=now", "--overwrite",
                   check=False)
    assert bad.returncode != 0 and "is invalid" in bad.stderr, bad.stderr
    assert "metadata.annotations[kosmos.io/client-ca-rotation-start]: Invalid value: 'now'" in bad.stderr
    assert "RFC 3339" in bad.stderr
    assert host.json("get", "vc", "dev", "-n", NS)["metadata"].get("annotations") == before
