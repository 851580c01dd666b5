"""Registering and deploying vc-apiserver on a real host cluster (kube-apiserver with the aggregation
layer, kube-controller-manager), driven by `python -m apiservice` and kubectl as a platform team would."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from apiserver.__main__ import parse_args as server_args
from apiserver.kubeclient.client import ClusterAccess, HostError, KubeClient
from apiserver.server.app import SHUTDOWN_TIMEOUT
from apiservice import tls
from apiservice.manifests import AGENT_SECRETS, APISERVICE, DEPLOY, ENCRYPTION_SECRET, SECRETS
from hack.harness import REPO, ApiServer, Etcd, HostCluster, Pki, free_port, wait_until
from reconciler.nodeagent import staticpod

pytestmark = pytest.mark.e2e

NAMESPACE = "kosmos-system"
SA_USER = "system:serviceaccount:kosmos-system:vc-apiserver"
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def apiservice(*args: str | Path | int, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The installer exactly as users run it."""
    proc = subprocess.run([sys.executable, "-m", "apiservice", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})
    if check and proc.returncode != 0:
        raise AssertionError(f"python -m apiservice {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def docs(stream: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(stream) if d]


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    cluster = HostCluster(tmp_path_factory.mktemp("host"), free_port(), free_port(), free_port())
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def kosmos_namespace(host: HostCluster) -> None:
    """kosmos-system for real, as rendered: server-side dry-runs of namespaced objects need it to exist,
    and its Pod Security labels to judge the workloads."""
    rendered = docs(apiservice("render", "--mode", "cluster").stdout)
    host.kubectl("apply", "-f", "-", input=json.dumps(of_kind(rendered, "Namespace")[0]))


@pytest.fixture
def cleanup() -> Iterator[Callable[[Callable[[], object]], None]]:
    """Register what to undo after the test (stopping processes), undone last registered first."""
    undo: list[Callable[[], object]] = []
    yield undo.append
    for action in reversed(undo):
        action()


def allowed(host: HostCluster, user: str, namespace: str, checks: list[tuple[str, str]]) -> list[bool]:
    """SubjectAccessReviews for (verb, resource[/subresource]) in kosmos.io: the very question vc-apiserver
    asks the host. (`kubectl auth can-i` cannot phrase it while the group is not served: it needs discovery.)"""
    reviews = [{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "resourceAttributes": {
                    "namespace": namespace, "verb": verb, "group": "kosmos.io", "resource": resource.split("/")[0],
                    "subresource": resource.partition("/")[2]}}} for verb, resource in checks]
    out = host.kubectl("create", "-o", 'jsonpath={.status.allowed}{"\\n"}', "-f", "-",
                       input=json.dumps({"apiVersion": "v1", "kind": "List", "items": reviews})).stdout
    return [line == "true" for line in out.splitlines()]


def can_i(host: HostCluster, user: str, verb: str, resource: str, namespace: str) -> bool:
    return allowed(host, user, namespace, [(verb, resource)])[0]


def bind(host: HostCluster, namespace: str, **users_to_roles: str) -> None:
    host.kubectl("create", "namespace", namespace)
    for user, role in users_to_roles.items():
        host.kubectl("create", "rolebinding", f"{user}-{role}", f"--clusterrole={role}", f"--user={user}",
                     "-n", namespace)


def aggregated(host: HostCluster, namespace: str, admin: str, editor: str, viewer: str) -> bool:
    """The clusterrole-aggregation controller has folded our roles into admin, edit and view."""
    return (can_i(host, admin, "get", "virtualclusters/kubeconfig", namespace)
            and can_i(host, editor, "get", "virtualclusters/kubeconfig", namespace)
            and can_i(host, viewer, "watch", "virtualclusters", namespace))


# -- certificates ------------------------------------------------------------------------------------

def test_certs_name_the_service_as_the_aggregator_dials_it_and_are_reused(tmp_path: Path) -> None:
    apiservice("certs", "--dir", tmp_path)
    serving, ca = load_cert(tmp_path / "serving.crt"), load_cert(tmp_path / "ca.crt")
    serving.verify_directly_issued_by(ca)
    assert set(tls.sans(serving)) == {"vc-apiserver", "vc-apiserver.kosmos-system", "vc-apiserver.kosmos-system.svc",
                                      "vc-apiserver.kosmos-system.svc.cluster.local"}
    usages = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages

    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    apiservice("certs", "--dir", tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_local_certs_add_loopback_names_and_keep_the_ca(tmp_path: Path) -> None:
    apiservice("certs", "--dir", tmp_path)
    ca_before = (tmp_path / "ca.crt").read_bytes()
    apiservice("certs", "--dir", tmp_path, "--local")
    assert (tmp_path / "ca.crt").read_bytes() == ca_before, "the caBundle of a registered APIService stays valid"
    assert {"localhost", "127.0.0.1", "vc-apiserver.kosmos-system.svc"} <= set(tls.sans(load_cert(tmp_path / "serving.crt")))


def test_local_certs_alone_make_no_etcd_pki(tmp_path: Path) -> None:
    apiservice("certs", "--dir", tmp_path, "--local")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key", "serving.crt", "serving.key"]


def test_certs_for_another_service_and_namespace(tmp_path: Path) -> None:
    apiservice("certs", "--dir", tmp_path, "--service", "kosmos-api", "--namespace", "platform")
    assert "kosmos-api.platform.svc" in tls.sans(load_cert(tmp_path / "serving.crt"))


def test_cluster_certs_give_etcd_mutual_tls_for_every_member(tmp_path: Path) -> None:
    apiservice("certs", "--dir", tmp_path)
    etcd_ca, server, client = (load_cert(tmp_path / f"{s}.crt") for s in ("etcd-ca", "etcd-server", "etcd-client"))
    server.verify_directly_issued_by(etcd_ca)
    client.verify_directly_issued_by(etcd_ca)
    names = set(tls.sans(server))
    assert {f"vc-apiserver-etcd-{i}.vc-apiserver-etcd.kosmos-system.svc" for i in range(3)} <= names
    assert "vc-apiserver-etcd-client.kosmos-system.svc" in names
    server_usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(server_usages), "peers dial peers"
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]


# -- rendering ---------------------------------------------------------------------------------------

def test_render_needs_no_cluster_and_fills_in_the_installation(tmp_path: Path) -> None:
    objs = docs(apiservice("render", "--mode", "cluster", "--cert-dir", tmp_path, "--image", "registry.example/vc:1").stdout)
    assert objs[0]["kind"] == "Namespace" and objs[-1]["kind"] == "APIService"
    spec = objs[-1]["spec"]
    assert base64.b64decode(spec["caBundle"]) == (tmp_path / "ca.crt").read_bytes()
    assert (spec["group"], spec["version"], spec["groupPriorityMinimum"], spec["versionPriority"]) == (
        "kosmos.io", "v1alpha1", 1000, 15)
    assert spec["service"] == {"name": "vc-apiserver", "namespace": NAMESPACE, "port": 443}
    [deployment] = of_kind(objs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/vc:1"


def test_workloads_mount_exactly_the_secrets_the_installer_creates(tmp_path: Path) -> None:
    objs = docs(apiservice("render", "--mode", "cluster", "--cert-dir", tmp_path).stdout)
    mounted = {v["secret"]["secretName"] for kind in ("Deployment", "StatefulSet") for w in of_kind(objs, kind)
               for v in w["spec"]["template"]["spec"].get("volumes", []) if "secret" in v}
    rendered = {s["metadata"]["name"] for s in of_kind(objs, "Secret")}
    assert mounted == rendered == set(SECRETS)


def test_the_server_deployment_is_highly_available_and_probed_over_https() -> None:
    objs = docs(apiservice("render", "--mode", "cluster").stdout)
    [deployment] = of_kind(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (container["livenessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["scheme"]) == (
        "/livez", "HTTPS")
    assert (container["readinessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["scheme"]) == (
        "/readyz", "HTTPS")
    assert container["resources"]["requests"] and container["resources"]["limits"]
    flags = {a.split("=")[0] for a in container["args"]}
    assert {"--secure-port", "--tls-cert-file", "--tls-private-key-file", "--etcd-servers", "--etcd-cafile",
            "--etcd-certfile", "--etcd-keyfile"} <= flags
    # A rolling update waits out the shutdown: the delay, then the requests in flight.
    delay = float(next(a.split("=")[1] for a in container["args"] if a.startswith("--shutdown-delay-duration=")))
    assert pod["terminationGracePeriodSeconds"] >= delay + SHUTDOWN_TIMEOUT
    [service] = [s for s in of_kind(objs, "Service") if s["metadata"]["name"] == "vc-apiserver"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, 6443)]
    [etcd] = of_kind(objs, "StatefulSet")
    assert etcd["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert "--client-cert-auth=true" in etcd["spec"]["template"]["spec"]["containers"][0]["args"]


def test_local_render_points_the_aggregator_at_localhost() -> None:
    objs = docs(apiservice("render", "--mode", "local", "--port", "40123").stdout)
    assert sorted(o["kind"] for o in objs if o["kind"] in ("Deployment", "StatefulSet", "Secret")) == []
    [service] = of_kind(objs, "Service")
    assert (service["spec"]["type"], service["spec"]["externalName"]) == ("ExternalName", "localhost")
    assert [p["port"] for p in service["spec"]["ports"]] == [40123]
    assert of_kind(objs, "APIService")[0]["spec"]["service"] == {
        "name": "vc-apiserver", "namespace": NAMESPACE, "port": 40123}


def test_the_view_role_never_reaches_the_kubeconfig_or_snapshots_subresources() -> None:
    for mode in ("cluster", "local"):
        for role in of_kind(docs(apiservice("render", "--mode", mode).stdout), "ClusterRole"):
            if role["metadata"]["labels"].get("rbac.authorization.k8s.io/aggregate-to-view") == "true":
                assert all("virtualclusters/kubeconfig" not in r["resources"] and "*" not in r["resources"]
                           and "virtualclusters/snapshots" not in r["resources"] for r in role["rules"])


def test_an_overlay_is_built_instead_of_deploy_and_filled_in_like_it(tmp_path: Path) -> None:
    overlay = REPO / "hack" / "in-cluster"
    objs = docs(apiservice("render", "--mode", "cluster", "--node-joiner", "agent", "--overlay", overlay,
                           "--cert-dir", tmp_path, "--image", "registry.example/vc:1").stdout)
    assert not of_kind(objs, "DaemonSet")  # the overlay deletes the node agent's
    [etcd] = of_kind(objs, "StatefulSet")
    assert etcd["spec"]["replicas"] == 1
    [deployment] = of_kind(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["containers"][0]["image"] == "registry.example/vc:1" and "--node-joiner=agent" in pod["containers"][0]["args"]
    assert {s["metadata"]["name"] for s in of_kind(objs, "Secret")} == {
        *SECRETS, ENCRYPTION_SECRET, *(name for _, name in AGENT_SECRETS)}
    assert base64.b64decode(of_kind(objs, "APIService")[0]["spec"]["caBundle"]) == (tmp_path / "ca.crt").read_bytes()
    missing = apiservice("render", "--mode", "cluster", "--overlay", tmp_path, check=False)
    assert missing.returncode == 2 and f"--overlay {tmp_path}: no kustomization.yaml there" in missing.stderr


def test_flags_for_the_other_mode_are_refused() -> None:
    assert "--port applies to --mode local" in apiservice("render", "--mode", "cluster", "--port", "1",
                                                          check=False).stderr
    assert "--image applies to --mode cluster" in apiservice("render", "--mode", "local", "--image", "x",
                                                             check=False).stderr


# -- against the host ----------------------------------------------------------------------------------

def test_rendered_in_cluster_manifests_pass_server_side_dry_run(host: HostCluster, kosmos_namespace: None,
                                                                 tmp_path: Path) -> None:
    rendered = apiservice("render", "--mode", "cluster", "--cert-dir", tmp_path).stdout
    proc = host.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "Warning" not in proc.stderr, "no deprecation or Pod Security (restricted) warnings"
    for kind in ("apiservice.apiregistration.k8s.io/v1alpha1.kosmos.io", "deployment.apps/vc-apiserver",
                 "statefulset.apps/vc-apiserver-etcd", "secret/vc-apiserver-serving",
                 "rolebinding.rbac.authorization.k8s.io/kosmos:vc-apiserver:authentication-reader"):
        assert f"{kind} created (server dry run)" in proc.stdout
    assert host.kubectl("get", "apiservice", APISERVICE, "--ignore-not-found", "-o", "name").stdout == "", \
        "a dry run persists nothing"


@pytest.mark.parametrize("overlay", ["cluster", "local", "base"])
def test_kustomize_directories_pass_server_side_dry_run(host: HostCluster, kosmos_namespace: None,
                                                        overlay: str) -> None:
    proc = host.kubectl("apply", "-k", str(DEPLOY / overlay), "--dry-run=server")
    assert "Warning" not in proc.stderr
    assert "apiservice.apiregistration.k8s.io/v1alpha1.kosmos.io created (server dry run)" in proc.stdout


def test_a_platform_overlay_supplies_image_certificates_and_ca_bundle(host: HostCluster, kosmos_namespace: None,
                                                                     tmp_path: Path) -> None:
    """The recipe of apiservice/README.md: kustomize alone, no installer."""
    apiservice("certs", "--dir", tmp_path)
    ca_bundle = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()

    def tls_secret(name: str, leaf: str, ca: str) -> dict[str, Any]:
        return {"name": name, "namespace": NAMESPACE, "type": "kubernetes.io/tls",
                "files": [f"tls.crt={leaf}.crt", f"tls.key={leaf}.key", f"ca.crt={ca}.crt"]}

    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "cluster", tmp_path)],
        "images": [{"name": "vc-apiserver", "newName": "registry.example/platform/vc-apiserver", "newTag": "1.2.3"}],
        "secretGenerator": [tls_secret("vc-apiserver-serving", "serving", "ca"),
                            tls_secret("vc-apiserver-etcd-server", "etcd-server", "etcd-ca"),
                            tls_secret("vc-apiserver-etcd-client", "etcd-client", "etcd-ca")],
        "patches": [{"target": {"group": "apiregistration.k8s.io", "kind": "APIService", "name": APISERVICE},
                     "patch": yaml.safe_dump([{"op": "add", "path": "/spec/caBundle", "value": ca_bundle}])}]}))

    objs = docs(host.kubectl("kustomize", str(tmp_path)).stdout)
    [deployment] = of_kind(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/platform/vc-apiserver:1.2.3"
    generated = {s["metadata"]["name"] for s in of_kind(objs, "Secret")}
    assert {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v} <= generated, "hashed names followed"
    assert of_kind(objs, "APIService")[0]["spec"]["caBundle"] == ca_bundle
    proc = host.kubectl("apply", "-k", str(tmp_path), "--dry-run=server")
    assert "Warning" not in proc.stderr
    assert "deployment.apps/vc-apiserver created (server dry run)" in proc.stdout


def test_admin_and_edit_get_kubeconfigs_and_snapshots_view_only_reads(host: HostCluster) -> None:
    roles = of_kind(docs(apiservice("render", "--mode", "local").stdout), "ClusterRole")
    host.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": roles}))
    bind(host, "team-a", alice="admin", erin="edit", victor="view")
    wait_until(lambda: aggregated(host, "team-a", "alice", "erin", "victor"), 30, "clusterrole aggregation")

    def access(user: str) -> dict[str, set[str]]:
        checks = [(v, r) for r in ("virtualclusters", "virtualclusters/status", "virtualclusters/kubeconfig",
                                   "virtualclusters/snapshots") for v in ALL_VERBS]
        out: dict[str, set[str]] = {r: set() for _, r in checks}
        for (verb, resource), ok in zip(checks, allowed(host, user, "team-a", checks), strict=True):
            if ok:
                out[resource].add(verb)
        return out

    writer = {"virtualclusters": set(ALL_VERBS), "virtualclusters/status": {"get", "list", "watch"},
              "virtualclusters/kubeconfig": {"get"}, "virtualclusters/snapshots": {"get"}}
    assert access("alice") == writer
    assert access("erin") == writer
    assert access("victor") == {"virtualclusters": {"get", "list", "watch"},
                                "virtualclusters/status": {"get", "list", "watch"},
                                "virtualclusters/kubeconfig": set(), "virtualclusters/snapshots": set()}
    assert not can_i(host, "erin", "get", "virtualclusters/kubeconfig", "default"), "only where bound"


def test_local_install_registers_the_apiservice_and_uninstall_removes_everything(host: HostCluster,
                                                                                 tmp_path: Path) -> None:
    port, certs = free_port(), tmp_path / "certs"
    kubeconfig = host.admin_kubeconfig

    # Nothing serves on the port: the APIService is registered, and install says why it is not Available.
    proc = apiservice("install", "--kubeconfig", kubeconfig, "--mode", "local", "--cert-dir", certs,
                      "--port", port, "--wait-timeout", "5", check=False)
    assert proc.returncode == 1
    assert "APIService v1alpha1.kosmos.io is not Available after 5s: Available=False" in proc.stderr
    assert f"localhost:{port}" in proc.stderr
    assert "waiting for APIService v1alpha1.kosmos.io" in proc.stdout

    spec = json.loads(host.kubectl("get", "apiservice", APISERVICE, "-o", "json").stdout)["spec"]
    assert base64.b64decode(spec["caBundle"]) == (certs / "ca.crt").read_bytes()
    assert spec["service"] == {"name": "vc-apiserver", "namespace": NAMESPACE, "port": port}
    service = json.loads(host.kubectl("get", "service", "vc-apiserver", "-n", NAMESPACE, "-o", "json").stdout)
    assert (service["spec"]["externalName"], service["spec"]["ports"][0]["port"]) == ("localhost", port)
    for who in ("create tokenreviews.authentication.k8s.io", "create subjectaccessreviews.authorization.k8s.io",
                "get configmaps/extension-apiserver-authentication -n kube-system", "patch nodes",
                "create pods --subresource=eviction", "create deployments.apps -n tenant-ns", "create events.events.k8s.io"):
        assert host.kubectl("auth", "can-i", *who.split(), "--as", SA_USER, check=False).stdout.strip() == "yes", who
    assert host.kubectl("auth", "can-i", "create", "clusterroles", "--as", SA_USER,
                        check=False).stdout.strip() == "no"

    # Re-running converges (server-side apply), still explaining.
    assert apiservice("install", "--kubeconfig", kubeconfig, "--mode", "local", "--cert-dir", certs,
                      "--port", port, "--wait-timeout", "1", check=False).returncode == 1

    out = apiservice("uninstall", "--kubeconfig", kubeconfig, "--mode", "local").stdout
    assert out.index("v1alpha1.kosmos.io") < out.index("namespace")
    rendered = apiservice("render", "--mode", "local").stdout
    assert host.kubectl("get", "-f", "-", "--ignore-not-found", "-o", "name", input=rendered).stdout == ""
    assert apiservice("uninstall", "--kubeconfig", kubeconfig).returncode == 0, "idempotent"


def test_local_install_becomes_available_and_serves_users_through_the_host(
        host: HostCluster, tmp_path: Path, cleanup: Callable[[Callable[[], object]], None]) -> None:
    certs, port = tmp_path / "certs", free_port()
    apiservice("certs", "--dir", certs, "--local")
    authn = str(host.kubeconfig_for("vc-apiserver"))  # client cert for system:serviceaccount:kosmos-system:vc-apiserver

    # RBAC first, server second, as a Deployment would start: install applies, then waits for Available.
    install = subprocess.Popen([sys.executable, "-m", "apiservice", "install", "--kubeconfig",
                                str(host.admin_kubeconfig), "--mode", "local", "--cert-dir", str(certs),
                                "--port", str(port), "--wait-timeout", "90"],
                               cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cleanup(install.kill)
    etcd = Etcd(tmp_path / "etcd", free_port(), free_port(), tmp_path / "etcd.log")
    cleanup(etcd.stop)
    etcd.start()
    server = ApiServer(Pki(certs), etcd.url, port, tmp_path / "vc-apiserver.log", extra_args=[
        "--authentication-kubeconfig", authn, "--authorization-kubeconfig", authn])
    cleanup(server.stop)
    server.start(timeout=60)
    out, err = install.communicate(timeout=150)
    assert install.returncode == 0, f"{out}\n{err}\n--- vc-apiserver log:\n{server.proc and server.proc.tail()}"
    assert "APIService v1alpha1.kosmos.io is Available" in out

    # Users reach it through the host with their own identity and the host's RBAC.
    assert "virtualclusters" in host.kubectl("api-resources", "--api-group=kosmos.io").stdout
    bind(host, "team-b", erin="edit", victor="view")
    wait_until(lambda: aggregated(host, "team-b", "erin", "erin", "victor"), 30, "clusterrole aggregation")
    assert host.kubectl("get", "vc", "-n", "team-b", "--as", "erin").returncode == 0
    for user, answer in (("erin", "yes"), ("victor", "no")):
        assert host.kubectl("auth", "can-i", "get", "virtualclusters", "--subresource=kubeconfig", "--as", user,
                            "-n", "team-b", check=False).stdout.strip() == answer
    kubeconfig_path = "/apis/kosmos.io/v1alpha1/namespaces/team-b/virtualclusters/nope/kubeconfig"
    denied = host.kubectl("get", "--raw", kubeconfig_path, "--as", "victor", check=False)
    assert 'User "victor" cannot get resource "virtualclusters/kubeconfig" in API group "kosmos.io" in the ' \
           'namespace "team-b"' in denied.stderr
    assert "NotFound" in host.kubectl("get", "--raw", kubeconfig_path, "--as", "erin", check=False).stderr

    apiservice("uninstall", "--kubeconfig", host.admin_kubeconfig, "--mode", "local")
    assert host.kubectl("get", "apiservice", APISERVICE, "--ignore-not-found", "-o", "name").stdout == ""
    assert "virtualclusters" not in host.kubectl("api-resources", "--api-group=kosmos.io").stdout


def test_cluster_install_applies_the_workloads_for_real_and_uninstall_takes_their_volumes_too(
        host: HostCluster, tmp_path: Path) -> None:
    """The host runs no scheduler: pods stay Pending, so the APIService never becomes Available. What this
    shows is that the real objects are accepted (pods admitted under Pod Security `restricted`), how
    install explains the wait, and that uninstall leaves nothing behind, etcd's volumes included."""
    proc = apiservice("install", "--kubeconfig", host.admin_kubeconfig, "--mode", "cluster", "--cert-dir",
                      tmp_path / "certs", "--image", "registry.example/vc-apiserver:test", "--wait-timeout", "3",
                      check=False)
    assert proc.returncode == 1
    assert "is not Available after 3s" in proc.stderr and "kubectl -n kosmos-system get pods" in proc.stderr

    def pods() -> list[str]:
        return host.kubectl("get", "pods", "-n", NAMESPACE, "-o", "name").stdout.split()

    wait_until(lambda: len(pods()) == 5, 30, "2 vc-apiserver and 3 etcd pods")
    assert sorted(p for p in pods() if "etcd" in p) == [f"pod/vc-apiserver-etcd-{i}" for i in range(3)]
    secrets = json.loads(host.kubectl("get", "secrets", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert {s["metadata"]["name"]: s["type"] for s in secrets} == {name: "kubernetes.io/tls" for name in SECRETS}
    assert len(host.kubectl("get", "pvc", "-n", NAMESPACE, "-o", "name").stdout.split()) == 3

    apiservice("uninstall", "--kubeconfig", host.admin_kubeconfig, "--mode", "cluster")
    rendered = apiservice("render", "--mode", "cluster", "--cert-dir", tmp_path / "certs").stdout
    assert host.kubectl("get", "-f", "-", "--ignore-not-found", "-o", "name", input=rendered).stdout == ""
    assert host.kubectl("get", "pvc", "-A", "-o", "name").stdout == ""


# -- the node agent (--node-joiner agent) ----------------------------------------------------------------

AGENT_NS = "kosmos-node-agent"
AGENT_SECRET_NAMES = {name for _, name in AGENT_SECRETS} | {ENCRYPTION_SECRET}


def test_agent_certs_give_each_side_the_other_sides_ca_only_and_are_reused(tmp_path: Path) -> None:
    apiservice("certs", "--dir", tmp_path / "plain")
    assert not any(p.name.startswith(("node-agent", "encryption")) for p in (tmp_path / "plain").iterdir()), \
        "nothing new without the agent"

    apiservice("certs", "--dir", tmp_path, "--node-joiner", "agent")
    agent_ca, client_ca = load_cert(tmp_path / "node-agent-ca.crt"), load_cert(tmp_path / "node-agent-client-ca.crt")
    serving, client = load_cert(tmp_path / "node-agent-serving.crt"), load_cert(tmp_path / "node-agent-client.crt")
    serving.verify_directly_issued_by(agent_ca)
    client.verify_directly_issued_by(client_ca)
    assert agent_ca.subject != client_ca.subject and agent_ca.public_key() != client_ca.public_key()
    assert tls.sans(serving) == ["kosmos-node-agent"], "the joiner's pinned name, no node address"
    assert list(serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert client.subject.rfc4514_string() == "CN=kosmos:node-agent-client"
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    key = tmp_path / "encryption.key"
    assert len(base64.b64decode(key.read_text())) == 32 and key.stat().st_mode & 0o777 == 0o600
    for stem in ("node-agent-ca", "node-agent-client-ca", "node-agent-serving", "node-agent-client"):
        assert (tmp_path / f"{stem}.key").stat().st_mode & 0o777 == 0o600

    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    apiservice("certs", "--dir", tmp_path, "--node-joiner", "agent")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before, "reused, key included"


def test_render_with_the_node_agent_wires_the_secrets_flags_and_mounts(tmp_path: Path) -> None:
    plain = docs(apiservice("render", "--mode", "cluster").stdout)
    assert not of_kind(plain, "DaemonSet")
    assert not any(a.startswith("--node-") for a in of_kind(plain, "Deployment")[0]["spec"]["template"]["spec"][
        "containers"][0]["args"]), "default installs are unchanged"

    objs = docs(apiservice("render", "--mode", "cluster", "--node-joiner", "agent", "--cert-dir", tmp_path,
                           "--image", "registry.example/vc:2").stdout)
    assert {o["metadata"]["name"] for o in objs[:2] if o["kind"] == "Namespace"} == {NAMESPACE, AGENT_NS}, \
        "namespaces first"
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in of_kind(objs, "Secret")}

    def data(namespace: str, name: str, key: str) -> bytes:
        return base64.b64decode(secrets[(namespace, name)]["data"][key])

    # vc-apiserver: the joiner's flags name files of a mounted Secret holding the installer's files.
    [deployment] = of_kind(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "registry.example/vc:2"
    server = server_args(container["args"])
    assert (server.node_joiner, server.node_agent_port, server.control_plane_runtime) == ("agent", 10350, "pods")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounted = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}

    def secret_file(path: str) -> bytes:
        directory, _, key = path.rpartition("/")
        return data(NAMESPACE, mounted[directory]["secret"]["secretName"], key)

    assert secret_file(server.node_agent_ca_file) == (tmp_path / "node-agent-ca.crt").read_bytes()
    assert secret_file(server.node_agent_client_cert_file) == (tmp_path / "node-agent-client.crt").read_bytes()
    assert secret_file(server.node_agent_client_key_file) == (tmp_path / "node-agent-client.key").read_bytes()
    assert secret_file(server.encryption_key_file) == (tmp_path / "encryption.key").read_bytes()

    # The agent: its installer mounts the agents' Secret, serving certificate and the clients' CA.
    [daemonset] = of_kind(objs, "DaemonSet")
    installer = daemonset["spec"]["template"]["spec"]
    assert installer["containers"][0]["image"] == "registry.example/vc:2", "the agent runs the server's image"
    [secret_volume] = [v for v in installer["volumes"] if "secret" in v]
    assert secret_volume["secret"]["secretName"] == "kosmos-node-agent-tls"
    assert data(AGENT_NS, "kosmos-node-agent-tls", "tls.crt") == (tmp_path / "node-agent-serving.crt").read_bytes()
    assert data(AGENT_NS, "kosmos-node-agent-tls", "ca.crt") == (tmp_path / "node-agent-client-ca.crt").read_bytes()
    assert {name for _, name in secrets} == set(SECRETS) | AGENT_SECRET_NAMES

    local = docs(apiservice("render", "--mode", "local", "--node-joiner", "agent", "--cert-dir", tmp_path).stdout)
    assert [s["metadata"]["name"] for s in of_kind(local, "Secret")] == ["kosmos-node-agent-tls"], \
        "a local server reads its agent files from the certificate directory"
    assert len(of_kind(local, "DaemonSet")) == 1 and not of_kind(local, "Deployment")


@pytest.fixture
def agent_namespace(host: HostCluster, kosmos_namespace: None) -> None:
    rendered = docs(apiservice("render", "--mode", "cluster", "--node-joiner", "agent").stdout)
    [namespace] = [n for n in of_kind(rendered, "Namespace") if n["metadata"]["name"] == AGENT_NS]
    host.kubectl("apply", "-f", "-", input=json.dumps(namespace))


def test_the_node_agent_and_its_static_pod_pass_server_side_dry_run(host: HostCluster, agent_namespace: None,
                                                                    tmp_path: Path) -> None:
    rendered = apiservice("render", "--mode", "cluster", "--node-joiner", "agent", "--cert-dir", tmp_path).stdout
    proc = host.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "Warning" not in proc.stderr
    for kind in ("daemonset.apps/kosmos-node-agent", "secret/kosmos-node-agent-tls",
                 "secret/vc-apiserver-node-agent-client", "secret/vc-apiserver-encryption-key",
                 "deployment.apps/vc-apiserver", "role.rbac.authorization.k8s.io/kosmos-node-agent-installer"):
        assert f"{kind} created (server dry run)" in proc.stdout, kind
    for overlay in ("agent", "agent-uninstall", "cluster-agent"):
        proc = host.kubectl("apply", "-k", str(DEPLOY / overlay), "--dry-run=server")
        assert "Warning" not in proc.stderr, overlay
        assert "daemonset.apps/kosmos-node-agent created (server dry run)" in proc.stdout, overlay

    # The static pod as its kubelet's mirror pod: what the host admits for a pod referencing no API object.
    pod = yaml.safe_load(staticpod.render(staticpod.AgentPod("registry.example/vc:2", "worker-1", tls_hash="0" * 64)))
    pod["metadata"]["annotations"]["kubernetes.io/config.mirror"] = "0" * 32
    pod["spec"]["nodeName"] = "worker-1"
    proc = host.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    assert "Warning" not in proc.stderr
    admitted = json.loads(proc.stdout)
    assert admitted["spec"]["priority"] == 2000001000, "system-node-critical"
    assert admitted["spec"]["containers"][0]["args"] == pod["spec"]["containers"][0]["args"]


async def test_cluster_install_with_the_node_agent_and_uninstall_retires_the_agents_first(
        host: HostCluster, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    proc = apiservice("install", "--kubeconfig", host.admin_kubeconfig, "--mode", "cluster", "--node-joiner", "agent",
                      "--cert-dir", certs, "--image", "registry.example/vc-apiserver:agent", "--wait-timeout", "3",
                      check=False)
    assert proc.returncode == 1 and "is not Available after 3s" in proc.stderr, proc.stderr
    for namespace, name in (*AGENT_SECRETS, (NAMESPACE, ENCRYPTION_SECRET)):
        assert host.kubectl("get", "secret", name, "-n", namespace, "-o", "name").stdout.strip() == f"secret/{name}"

    # The installer finds the agent's image in its own Pod, with its ServiceAccount's rights only.
    daemonset = json.loads(host.kubectl("get", "daemonset", "kosmos-node-agent", "-n", AGENT_NS, "-o", "json").stdout)
    template = daemonset["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "installer-0", "namespace": AGENT_NS,
                                                          "labels": {"test": "installer"}}, "spec": template["spec"]}
    host.kubectl("create", "-f", "-", input=json.dumps(pod))
    token = host.kubectl("create", "token", "kosmos-node-agent-installer", "-n", AGENT_NS).stdout.strip()
    client = KubeClient(ClusterAccess(host.url, ssl.create_default_context(cafile=str(host.pki.path("ca.crt"))),
                                      token=token))
    try:
        assert await staticpod.pod_image(client, AGENT_NS, "installer-0") == "registry.example/vc-apiserver:agent"
        with pytest.raises(HostError) as denied:
            await client.get(f"/api/v1/namespaces/{AGENT_NS}/secrets/kosmos-node-agent-tls")
        assert denied.value.code == 403
    finally:
        await client.close()

    # Another certificate directory would bring another encryption key: refused before anything changes.
    proc = apiservice("install", "--kubeconfig", host.admin_kubeconfig, "--mode", "cluster", "--node-joiner", "agent",
                      "--cert-dir", tmp_path / "other", "--wait-timeout", "1", check=False)
    assert proc.returncode == 1 and "would make every stored tenant key unreadable" in proc.stderr, proc.stderr
    stored = json.loads(host.kubectl("get", "secret", ENCRYPTION_SECRET, "-n", NAMESPACE, "-o", "json").stdout)
    assert base64.b64decode(stored["data"]["encryption.key"]) == (certs / "encryption.key").read_bytes()

    # A promoted node may have its kubelet in a tenant: nothing is removed while one exists.
    host.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "promoted-1", "labels": {"kosmos.io/virtualcluster": "team-a.edge"}}}))
    try:
        proc = apiservice("uninstall", "--kubeconfig", host.admin_kubeconfig, check=False)
        assert proc.returncode == 1 and "node/promoted-1" in proc.stderr and "Release them first" in proc.stderr
        assert host.kubectl("get", "apiservice", APISERVICE, "-o", "name").stdout.strip()
    finally:
        host.kubectl("delete", "node", "promoted-1")

    out = apiservice("uninstall", "--kubeconfig", host.admin_kubeconfig).stdout
    assert out.index("removing the node agent from every node") < out.index(f"deleting APIService {APISERVICE}")
    rendered = apiservice("render", "--mode", "cluster", "--node-joiner", "agent", "--cert-dir", certs).stdout
    assert host.kubectl("get", "-f", "-", "--ignore-not-found", "-o", "name", input=rendered).stdout == ""
