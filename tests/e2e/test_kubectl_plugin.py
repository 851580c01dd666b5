"""``kubectl vc`` on the playground: the plugin a user installs with the package, driven through kubectl
itself (kubectl finds ``kubectl-vc`` on PATH), against the host as ``make up`` starts it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hack.harness import BIN
from hack.stack import Stack
from tests.conftest import Kubectl, vc

pytestmark = pytest.mark.e2e

NS = "plugin"


@pytest.fixture(scope="module")
def home(process_host: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's kubeconfig: a copy of the host admin's, which connect may write into."""
    path = tmp_path_factory.mktemp("user") / "config"
    shutil.copyfile(process_host.kubeconfig, path)
    return path


def kubectl(kubeconfig: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """kubectl as a user types it; a plugin's flags come after its name (kubectl refuses them before)."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(BIN), os.environ["PATH"]])}
    head = [args[0], "--kubeconfig", str(kubeconfig)] if args[0] == "vc" else ["--kubeconfig", str(kubeconfig),
                                                                                args[0]]
    return subprocess.run([str(BIN / "kubectl"), *head, *args[1:]], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_connect_list_hibernate_and_wake_through_kubectl_vc(home: Path) -> None:
    host = Kubectl(home, host_namespaces=True)
    host.ensure_namespace(NS)
    host.run("create", "-f", "-", input=json.dumps(vc("hello", NS)))
    connected = kubectl(home, "vc", "connect", "hello", "-n", NS, "--no-switch")
    assert connected.returncode == 0, connected.stderr
    assert f'context "{NS}-hello" written to {home}' in connected.stdout
    config = yaml.safe_load(home.read_text())
    user = next(u["user"] for u in config["users"] if u["name"] == f"{NS}-hello")
    assert user["exec"]["args"][:4] == ["credential", "hello", "-n", NS]
    assert config["current-context"] != f"{NS}-hello"
    tenant = kubectl(home, "--context", f"{NS}-hello", "get", "namespaces", "-o", "name")
    assert tenant.returncode == 0 and "namespace/kube-system" in tenant.stdout, tenant.stderr  # via the exec plugin
    listed = kubectl(home, "vc", "list", "-n", NS)
    assert listed.returncode == 0 and listed.stdout.splitlines()[0].split() == [
        "NAMESPACE", "NAME", "PHASE", "NODES", "SLICE", "ENDPOINT"]
    assert listed.stdout.splitlines()[1].split()[:4] == [NS, "hello", "Completed", "0/0"]
    assert kubectl(home, "vc", "hibernate", "hello", "-n", NS).returncode == 0
    host.run("wait", "vc/hello", "-n", NS, "--for=jsonpath={.status.phase}=Hibernated", "--timeout=120s", timeout=150)
    woken = kubectl(home, "vc", "-n", NS, "connect", "hello", "--no-switch")  # flags before the verb too
    assert woken.returncode == 0 and "waking virtualcluster plugin/hello" in woken.stderr, woken.stderr
    again = kubectl(home, "--context", f"{NS}-hello", "get", "namespaces", "-o", "name")
    assert again.returncode == 0, again.stderr
    host.run("delete", "vc", "hello", "-n", NS, "--wait", timeout=120)


def test_credentials_are_listed_and_a_revoked_one_is_refused_by_the_tenant(home: Path, tmp_path: Path) -> None:
    host = Kubectl(home, host_namespaces=True)
    host.ensure_namespace(NS)
    host.run("create", "-f", "-", input=json.dumps(vc("creds", NS)))
    host.run("wait", "vc/creds", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=150)
    fetched = tmp_path / "tenant.kubeconfig"
    fetched.write_text(host.run("get", "--raw", f"/apis/kosmos.io/v1alpha1/namespaces/{NS}/virtualclusters/creds/"
                                                "kubeconfig").stdout)
    assert kubectl(fetched, "get", "namespaces").returncode == 0
    own = kubectl(home, "vc", "credentials", "creds", "-n", NS)
    assert own.returncode == 0, own.stderr
    header, *rows = own.stdout.splitlines()
    assert header.split() == ["ID", "CLUSTER", "USER", "ISSUED", "EXPIRES", "LAST", "USED"]
    assert len(rows) == 1 and rows[0].split()[1:3] == ["creds", "kubernetes-admin"]
    credential_id = rows[0].split()[0]
    everyone = kubectl(home, "vc", "credentials", "-n", NS)
    assert everyone.returncode == 0 and credential_id in everyone.stdout
    revoked = kubectl(home, "vc", "credentials", "revoke", credential_id, "-n", NS)
    assert revoked.returncode == 0 and f"credential {credential_id} revoked" in revoked.stdout, revoked.stderr
    deadline = time.monotonic() + 10
    while kubectl(fetched, "get", "namespaces").returncode == 0:
        assert time.monotonic() < deadline, "the revoked credential still works after 10 s"
        time.sleep(0.2)
    assert f"the credential {credential_id} was revoked" in kubectl(fetched, "get", "--raw", "/api/v1/namespaces").stderr
    host.run("delete", "vc", "creds", "-n", NS, "--wait", timeout=120)


def test_each_verb_has_help_and_errors_are_one_line_and_a_failing_exit(home: Path) -> None:
    for verb in ("list", "connect", "hibernate", "wake", "snapshot", "credential", "credentials", "rotate"):
        helped = kubectl(home, "vc", verb, "--help")
        assert helped.returncode == 0 and f"kubectl vc {verb}" in helped.stdout
    missing = kubectl(home, "vc", "connect", "nope", "-n", NS, "--timeout", "5")
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines() == [
        'error: Error from server (NotFound): virtualclusters.kosmos.io "nope" not found']
    Kubectl(home, host_namespaces=True).run("create", "-f", "-", input=json.dumps(vc("nobackup", NS)))
    refused = kubectl(home, "vc", "snapshot", "nobackup", "-n", NS)
    assert refused.returncode != 0 and refused.stderr.strip().splitlines() == [
        'error: virtualcluster "nobackup" has no spec.backup: set one (its schedule and how many to keep) before '
        'asking for a snapshot']
    Kubectl(home, host_namespaces=True).run("delete", "vc", "nobackup", "-n", NS, "--wait", timeout=120)
