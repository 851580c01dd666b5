"""Access that can be taken back: every credential the kubeconfig subresource issues is a
VirtualClusterCredential; deleting it, or losing the host permission it was issued under, refuses it in
the tenant within seconds, and an outage of vc-apiserver locks nobody out.

Behind a real host (delegated authentication and authorization), with process-runtime tenants."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from hack.harness import wait_until
from hack.stack import Stack
from tests.conftest import Kubectl, process_stack, vc
from tests.support import report

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
NS = "team-k"
REVOCATION_BOUND = 10.0  # seconds from the delete to the first refused request (the promise)
HOST_ACCESS_BOUND = 60.0  # seconds from losing the host permission to the first refused request
# How long vc-apiserver stays down in the outage test; CREDENTIALS_OUTAGE_SECONDS=600 measures the promise of
# ten minutes (docs/lifecycle.md gives that run's numbers).
OUTAGE = float(os.environ.get("CREDENTIALS_OUTAGE_SECONDS", "20"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("credentials"), 1, 5)


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Kubectl:
    """The host admin; in NS, alice is a namespace admin and carol may only fetch kubeconfigs."""
    k = Kubectl(stack.kubeconfig, host_namespaces=True)
    k.ensure_namespace(NS)
    k.run("create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", NS)
    k.run("create", "role", "fetch-kubeconfig", "--verb=get", "--resource=virtualclusters",
          "--resource=virtualclusters/kubeconfig", "--resource=virtualclusters/credentials", "-n", NS)
    k.run("create", "rolebinding", "carol-fetch", "--role=fetch-kubeconfig", "--user=carol", "-n", NS)
    for user, verb, what in (("alice", "create", "virtualclusters"), ("carol", "get", "virtualclusters/kubeconfig")):
        wait_until(lambda u=user, v=verb, w=what: k.run("auth", "can-i", v, w, "-n", NS, "--as", u,
                                                     check=False).stdout.strip() == "yes", 30, "RBAC")
    k.run("create", "-f", "-", "--as", "alice", "-n", NS, input=json.dumps(vc("dev", NS)))
    k.run("wait", "vc/dev", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=150)
    return k


def issue(admin: Kubectl, user: str, tmp_path: Path) -> tuple[Kubectl, str]:
    """A kubeconfig fetched by ``user``, as a tenant kubectl, and the id of its credential."""
    raw = admin.run("get", "--raw", f"{GV}/namespaces/{NS}/virtualclusters/dev/kubeconfig", "--as", user).stdout
    path = tmp_path / f"{user}-{time.monotonic_ns()}.kubeconfig"
    path.write_text(raw)
    tenant = Kubectl(path)
    groups = tenant.json("auth", "whoami")["status"]["userInfo"]["groups"]
    ids = [g.removeprefix("kosmos:credential:") for g in groups if g.startswith("kosmos:credential:")]
    assert len(ids) == 1, groups
    return tenant, ids[0]


def works(tenant: Kubectl) -> bool:
    return tenant.run("get", "ns", "default", "-o", "name", check=False).returncode == 0


def refused(tenant: Kubectl) -> bool:
    result = tenant.run("get", "ns", "default", "-o", "name", check=False)
    return result.returncode != 0 and "Forbidden" in result.stderr


def test_each_kubeconfig_issued_is_a_credential_an_admin_lists_and_its_holder_sees_alone(
        admin: Kubectl, tmp_path: Path) -> None:
    _, alices = issue(admin, "alice", tmp_path)
    _, carols = issue(admin, "carol", tmp_path)
    listed = admin.json("get", "virtualclustercredentials", "-n", NS, "--as", "alice")["items"]
    mine = {c["metadata"]["name"]: c for c in listed}
    assert {alices, carols} <= set(mine)
    carol = mine[carols]
    assert carol["spec"]["user"] == "carol" and carol["spec"]["virtualCluster"] == "dev"
    assert "system:authenticated" in carol["spec"]["groups"]
    assert carol["spec"]["expirationTimestamp"] > carol["metadata"]["creationTimestamp"]
    table = admin.run("get", "vccred", carols, "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "CLUSTER", "USER", "EXPIRES", "LAST", "USED", "AGE"]
    # carol may not list credentials, yet sees hers (the cluster's credentials subresource), and only hers
    denied = admin.run("get", "vccred", "-n", NS, "--as", "carol", check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
    own = json.loads(admin.run("get", "--raw", f"{GV}/namespaces/{NS}/virtualclusters/dev/credentials",
                               "--as", "carol").stdout)
    assert own["kind"] == "VirtualClusterCredentialList"
    assert carols in {c["metadata"]["name"] for c in own["items"]} and {c["spec"]["user"] for c in own["items"]} == {"carol"}
    # nobody creates or edits one: the subresource issues them
    create = admin.run("create", "-f", "-", "-n", NS, check=False, input=json.dumps({
        "apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualClusterCredential", "metadata": {"name": "forged"},
        "spec": {"virtualCluster": "dev", "user": "mallory", "expirationTimestamp": "2099-01-01T00:00:00Z"}}))
    assert create.returncode != 0 and "(MethodNotAllowed)" in create.stderr, create.stderr


def test_deleting_a_credential_refuses_it_within_seconds_and_no_other(admin: Kubectl, tmp_path: Path) -> None:
    revoked, revoked_id = issue(admin, "alice", tmp_path)
    kept, _ = issue(admin, "alice", tmp_path)
    assert works(revoked) and works(kept)
    admin.run("delete", "virtualclustercredential", revoked_id, "-n", NS, "--as", "alice")
    delay = wait_until(lambda: refused(revoked), REVOCATION_BOUND, "the revoked credential refused")
    report.say(f"credentials: revocation_delay_s = {round(delay, 2)}")
    message = revoked.run("get", "--raw", "/api/v1/namespaces/default", check=False).stderr  # the server's reason
    assert f"the credential {revoked_id} was revoked" in message
    assert works(kept)
    events = admin.run("get", "events", "-n", NS, "--field-selector", "reason=CredentialRevoked").stdout
    assert revoked_id in events and "revoked by alice" in events


def test_losing_the_host_permission_refuses_the_users_credentials(admin: Kubectl, tmp_path: Path) -> None:
    admin.run("create", "rolebinding", "dave-fetch", "--role=fetch-kubeconfig", "--user=dave", "-n", NS)
    wait_until(lambda: admin.run("auth", "can-i", "get", "virtualclusters/kubeconfig", "-n", NS, "--as", "dave",
                               check=False).stdout.strip() == "yes", 30, "dave's RBAC")
    dave, _ = issue(admin, "dave", tmp_path)
    alice, _ = issue(admin, "alice", tmp_path)
    assert works(dave)
    admin.run("delete", "rolebinding", "dave-fetch", "-n", NS)
    delay = wait_until(lambda: refused(dave), HOST_ACCESS_BOUND, "dave's credential refused after losing access")
    report.say(f"credentials: host_access_loss_delay_s = {round(delay, 2)}")
    assert "may no longer get virtualclusters/kubeconfig" in dave.run("get", "--raw", "/api/v1/namespaces/default",
                                                                          check=False).stderr
    assert works(alice)


@pytest.mark.timeout(int(OUTAGE) + 240)
def test_issued_credentials_keep_working_while_vc_apiserver_is_down(
        stack: Stack, admin: Kubectl, tmp_path: Path) -> None:
    tenant, _ = issue(admin, "alice", tmp_path)
    assert works(tenant)
    stack.api.stop()
    try:
        outage, slowest, requests = time.monotonic(), 0.0, 0
        while time.monotonic() - outage < OUTAGE:
            started = time.monotonic()
            assert works(tenant), "a credential failed while vc-apiserver was down"
            slowest = max(slowest, time.monotonic() - started)
            requests += 1
        report.say(f"credentials: outage_requests_ok = {requests}")
        report.say(f"credentials: outage_slowest_request_s = {round(slowest, 2)}")
    finally:
        stack.api.start(wait=False)
        stack.api.wait_ready(60.0)
        wait_until(lambda: admin.run("get", "vc", "dev", "-n", NS, check=False).returncode == 0, 60,
                 "the host's aggregator reaching vc-apiserver again")
    # back up, revocation works again
    revoked, revoked_id = issue(admin, "alice", tmp_path)
    admin.run("delete", "virtualclustercredential", revoked_id, "-n", NS)
    wait_until(lambda: refused(revoked), REVOCATION_BOUND, "revocation after the outage")
    assert works(tenant)


def test_a_clusters_own_limit_shortens_its_credentials(admin: Kubectl, tmp_path: Path) -> None:
    admin.run("patch", "vc", "dev", "-n", NS, "--type=merge", "-p",
              '{"spec":{"credentials":{"maxExpirationSeconds":900}}}')
    try:
        for asked in ("", "?expirationSeconds=7200"):
            raw = admin.run("get", "--raw", f"{GV}/namespaces/{NS}/virtualclusters/dev/kubeconfig{asked}").stdout
            cert = x509.load_pem_x509_certificate(base64.b64decode(
                yaml.safe_load(raw)["users"][0]["user"]["client-certificate-data"]))
            remaining = (cert.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds()
            assert 840 < remaining <= 900, (asked, remaining)
        too_short = admin.run("patch", "vc", "dev", "-n", NS, "--type=merge", "-p",
                              '{"spec":{"credentials":{"maxExpirationSeconds":60}}}', check=False)
        assert too_short.returncode != 0 and "spec.credentials.maxExpirationSeconds" in too_short.stderr
    finally:
        admin.run("patch", "vc", "dev", "-n", NS, "--type=merge", "-p", '{"spec":{"credentials":null}}')
