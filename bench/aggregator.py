"""The optional third target: ours as users reach it, through a host kube-apiserver's aggregator.

The host is the harness's :class:`~hack.harness.HostCluster` reduced to etcd + kube-apiserver
(its controller-manager and kwok would only add noise). The registration is the product's own:
``python -m apiservice install --mode local``. The server behind the APIService is a second
vc-apiserver on *ours'* etcd, configured as in production (delegated authentication and
authorization against the host); it serves the objects ``ours`` created, so this target creates
none and its memory is not reported. Its cost while idle (its watch cache follows ours' writes)
is charged to ``ours``' rounds, a small handicap stated in ``docs/benchmarks.md``.

Behind the same aggregator, a fourth target measures the floor of that path: ``floorserver``
(Go, in ``bench/floorserver``) answers every get with one fixed object, and serves the watch
fan-out by sending each PATCH's object to its watchers, with nothing else in between. A get or
a watch event through the aggregator to it costs the host's own work and the least any backend
can do; what ours adds on top of that is the part ours can still win back.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from hack.harness import (
    REPO,
    ApiServer,
    HostCluster,
    HostPki,
    Pki,
    Proc,
    free_port,
    wait_until,
    write_kubeconfig,
)

from .client import namespace_name, virtualcluster
from .servers import OURS_ARGS, Lab, Target, http_get, target_from_kubeconfig

NAME = "via-aggregator"
FLOOR = "aggregator-floor"
FLOOR_GROUP = "floor.kosmos.io"
FLOOR_SOURCE = REPO / "bench" / "floorserver"


class BareHost(HostCluster):
    """etcd and kube-apiserver with the aggregation layer, nothing else."""

    def start(self, timeout: float = 90.0) -> BareHost:
        HostPki.ensure(self.root / "pki")
        write_kubeconfig(self.admin_kubeconfig, self.pki.kubeconfig(self.url, "admin"))
        etcd = self.etcd()
        self.procs["etcd"] = etcd.start().proc  # type: ignore[assignment]
        api = self._proc("kube-apiserver", self.apiserver_args()).start()
        try:
            wait_until(self.ready, timeout, "host kube-apiserver", interval=0.25)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{api.tail()}") from None
        return self

    def stop(self) -> None:
        """The harness's stop finds etcd by pid file only; without a run_dir that is none: stop ours."""
        super().stop()
        etcd = self.procs.get("etcd")
        if etcd is not None:
            etcd.stop()


def _apiservice(*args: str, timeout: float = 180) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "apiservice", *args], cwd=REPO, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def start_via_aggregator(lab: Lab, ours_etcd_url: str, namespaces: list[str]) -> tuple[Target, Target]:
    """Host up, APIService installed and Available, namespaces created on the host; the Target, and
    the floor's."""
    via, host = start_aggregated(lab, ours_etcd_url, namespaces)
    return via, _start_floor(lab, host, via)


def start_aggregated(lab: Lab, ours_etcd_url: str, namespaces: list[str]) -> tuple[Target, BareHost]:
    """Ours through a bare host's aggregator (no floor): the Target, and the host (to create more
    namespaces on, or stop)."""
    root = lab.root / "host"
    host = BareHost(root, free_port(), free_port(), free_port())
    lab.started.append(host)
    host.start()
    certs, port = root / "apiservice-certs", free_port()
    made = _apiservice("certs", "--dir", str(certs), "--local")
    if made.wait(60) != 0:
        raise RuntimeError(f"python -m apiservice certs: {made.communicate()[1]}")
    # RBAC first, server second, as a Deployment would start: install applies, then waits for Available.
    install = _apiservice("install", "--kubeconfig", str(host.admin_kubeconfig), "--mode", "local", "--cert-dir",
                          str(certs), "--port", str(port), "--wait-timeout", "120")
    authn = str(host.kubeconfig_for("vc-apiserver"))
    twin = ApiServer(Pki(certs), ours_etcd_url, port, lab.root / "log" / "vc-apiserver-aggregated.log",
                     extra_args=["--authentication-kubeconfig", authn, "--authorization-kubeconfig", authn,
                                 "--enable-reconciler", "false", "--v", "0", *OURS_ARGS])
    lab.started.append(twin)
    twin.start(timeout=90)
    out, err = install.communicate(timeout=180)
    if install.returncode != 0:
        raise RuntimeError(f"python -m apiservice install --mode local failed:\n{out}\n{err}")
    if namespaces:
        host.kubectl("apply", "-f", "-", input="\n---\n".join(
            f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}" for ns in namespaces))
    target = target_from_kubeconfig(NAME, host.admin_kubeconfig, lab.root, store_of="ours")
    ctx = target.ssl_context()
    wait_until(lambda: http_get(host.url + "/apis/kosmos.io/v1alpha1/virtualclusters?limit=1", ctx)[0] == 200, 60,
               "virtualclusters through the aggregator")
    assert twin.proc is not None and host.procs["kube-apiserver"].pid is not None
    via = Target(target.name, "vc-apiserver through the host's aggregator", target.url, target.ca, target.cert,
                 target.key, target.kubeconfig,
                 {"server": twin.proc.pid or 0, "aggregator": host.procs["kube-apiserver"].pid or 0},
                 store_of="ours")
    return via, host


def floor_binary() -> Path:
    """``go build`` of the floor server, cached by its source's hash beside the Kubernetes binaries."""
    source = b"".join((FLOOR_SOURCE / f).read_bytes() for f in ("go.mod", "main.go"))
    cache = Path(os.environ.get("VC_CACHE", Path.home() / ".cache" / "vc-apiserver")) / "bench"
    out = cache / f"floorserver-{hashlib.sha256(source).hexdigest()[:12]}"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        built = subprocess.run(["go", "build", "-trimpath", "-o", str(out) + ".tmp", "."], cwd=FLOOR_SOURCE,
                               capture_output=True, text=True,
                               env={**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": ""})
        if built.returncode != 0:
            raise RuntimeError(f"go build {FLOOR_SOURCE}: {built.stderr}")
        os.replace(str(out) + ".tmp", out)
    return out


def _start_floor(lab: Lab, host: BareHost, via: Target) -> Target:
    """The floor server on loopback, registered as ``v1alpha1.floor.kosmos.io`` like ours is."""
    root = lab.root / "floor"
    root.mkdir(parents=True, exist_ok=True)
    sample = virtualcluster(namespace_name(0), "floor", 0)  # what ours stores, with what ours adds
    sample["metadata"].update(uid="5e7c4b6e-0d6c-4a52-9d9b-3f6f0c1d2e3a", resourceVersion="123456", generation=1,
                              creationTimestamp="2026-01-01T00:00:00Z")
    (root / "object.json").write_bytes(json.dumps(sample, separators=(",", ":")).encode())
    port = free_port()
    pki = Pki(lab.root / "pki")
    crt, key = pki.cert("serving")
    # BENCH_FLOOR_HTTP2=1 lets the aggregator speak HTTP/2 to the floor, as it does to ours: the hop's cost
    # with one multiplexed connection instead of one per request or watch.
    http2 = ["--http2"] if os.environ.get("BENCH_FLOOR_HTTP2", "") not in ("", "0", "false") else []
    proc = Proc("floorserver", [str(floor_binary()), "--addr", f"127.0.0.1:{port}", "--tls-cert-file", str(crt),
                                "--tls-private-key-file", str(key), "--body", str(root / "object.json"), *http2],
                lab.root / "log" / "floorserver.log").start()
    lab.started.append(proc)
    # The same registration as ours in --mode local: an ExternalName Service to localhost. The
    # serving certificate names 127.0.0.1, not the Service, so its verification is skipped: it
    # happens once per connection, never per request.
    host.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vc-bench-floor", "namespace": "kosmos-system"},
         "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": f"v1alpha1.{FLOOR_GROUP}"},
         "spec": {"group": FLOOR_GROUP, "version": "v1alpha1", "insecureSkipTLSVerify": True,
                  "groupPriorityMinimum": 1000, "versionPriority": 15,
                  "service": {"namespace": "kosmos-system", "name": "vc-bench-floor", "port": port}}}]}))
    api = f"/apis/{FLOOR_GROUP}/v1alpha1"
    ctx = via.ssl_context()
    wait_until(lambda: http_get(f"{via.url}{api}/namespaces/{namespace_name(0)}/virtualclusters/x", ctx)[0] == 200,
               60, "the floor server through the aggregator")
    return Target(FLOOR, "a Go server answering every get with one fixed object and fanning each patch out to its "
                  "watchers, through the same aggregator",
                  via.url, via.ca, via.cert, via.key, via.kubeconfig,
                  {"server": proc.pid or 0, "aggregator": via.pids["aggregator"]}, store_of="ours", api=api)

