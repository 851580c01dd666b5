"""The servers under test, each on loopback with its own etcd, and how a client reaches them.

* ``ours``: vc-apiserver (the harness's :class:`~hack.harness.ApiServer`), reconciler off: the
  baseline has no controller either, and the benchmark measures the API server alone.
* ``baseline``: a bare kube-apiserver (no controller-manager, no kwok: they would add noise)
  serving the CRD of :mod:`bench.crd`.

Both etcds are the harness's :class:`~hack.harness.Etcd`: same binary, same flags. Both servers
present the same serving certificate and trust the same client CA, so TLS costs the same.
A :class:`Target` is all the load generator knows: a URL, a client certificate, a kubeconfig and
the pids whose memory to read, so a third target (ours through the host aggregator) is one more
:class:`Target`.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from certs import pki as certs
from hack.harness import ApiServer, Etcd, Pki, Proc, binary, free_port, wait_until, write_kubeconfig

from .crd import virtualcluster_crd

SERVICE_CIDR = "10.96.0.0/16"
# More flags for vc-apiserver, to set one change against another in the same bench (e.g. --enable-http2=false)
OURS_ARGS = shlex.split(os.environ.get("BENCH_OURS_ARGS", ""))


@dataclass(frozen=True)
class Target:
    """One endpoint serving ``virtualclusters.kosmos.io/v1alpha1`` to the load generator."""

    name: str  # "ours", "baseline", "ours-via-aggregator"
    description: str
    url: str
    ca: Path
    cert: Path
    key: Path
    kubeconfig: Path
    pids: dict[str, int] = field(default_factory=dict)  # role ("server", "etcd") -> pid whose RSS to read
    store_of: str = ""  # another target whose objects this one serves (a proxy): it creates none
    api: str = ""  # a floor's own group/version path (gets and the watch fan-out); "" = /apis/kosmos.io/v1alpha1

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx


def bench_pki(directory: Path) -> Pki:
    """The harness PKI (CA, ``serving`` for 127.0.0.1, ``admin`` in system:masters) plus the
    service-account key pair kube-apiserver refuses to start without."""
    out = Pki.ensure(directory)
    if not (directory / "sa.key").exists():
        key = certs.new_key("rsa")
        (directory / "sa.key").write_bytes(certs.key_pem(key))
        (directory / "sa.pub").write_bytes(certs.public_key_pem(key))
    return out


def http_get(url: str, ctx: ssl.SSLContext, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _send(method: str, url: str, ctx: ssl.SSLContext, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclass
class KubeApiServer:
    """kube-apiserver alone: the minimum flags to serve CRDs with client-certificate auth."""

    pki: Pki
    etcd_url: str
    port: int
    log: Path
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        crt, key = self.pki.cert("serving")
        sa = self.pki.dir
        return [binary("kube-apiserver"), "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", "--endpoint-reconciler-type=none", f"--etcd-servers={self.etcd_url}",
                f"--tls-cert-file={crt}", f"--tls-private-key-file={key}", f"--client-ca-file={self.pki.ca}",
                "--authorization-mode=RBAC",  # system:masters short-circuits RBAC, as our Standalone mode does
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa / 'sa.pub'}", f"--service-account-signing-key-file={sa / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}"]

    def _ctx(self) -> ssl.SSLContext:
        return self.pki.ssl_context("admin")

    def ready(self) -> bool:
        try:
            return http_get(self.url + "/readyz", self._ctx(), 2)[0] == 200
        except OSError:
            return False

    def start(self, timeout: float = 120.0) -> KubeApiServer:
        self.proc = Proc("kube-apiserver", self.command(), self.log).start()
        try:
            wait_until(self.ready, timeout, "kube-apiserver", interval=0.25)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.proc.tail()}") from None
        return self

    def install_crd(self, timeout: float = 60.0) -> None:
        """Create the CRD and wait until the resource is actually served (Established is not enough:
        the handler appears a moment later)."""
        ctx = self._ctx()
        code, body = _send("POST", self.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", ctx,
                           virtualcluster_crd())
        if code not in (201, 409):
            raise RuntimeError(f"creating the CRD: {code} {body.decode(errors='replace')}")
        wait_until(lambda: http_get(self.url + "/apis/kosmos.io/v1alpha1/virtualclusters?limit=1", ctx)[0] == 200,
                   timeout, "the virtualclusters CRD")

    def create_namespaces(self, names: list[str]) -> None:
        """kube-apiserver's NamespaceLifecycle admission needs them; vc-apiserver does not."""
        ctx = self._ctx()
        for name in names:
            code, body = _send("POST", self.url + "/api/v1/namespaces", ctx,
                               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            if code not in (201, 409):
                raise RuntimeError(f"creating namespace {name}: {code} {body.decode(errors='replace')}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


def etcd_version() -> str:
    out = subprocess.run([binary("etcd"), "--version"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0].split(":", 1)[-1].strip()


def kube_version() -> str:
    out = subprocess.run([binary("kube-apiserver"), "--version"], capture_output=True, text=True,
                         check=True).stdout
    return out.strip().split()[-1]


@dataclass
class Lab:
    """Starts both servers and their etcds under ``root``; :meth:`stop` ends exactly those processes."""

    root: Path
    namespaces: list[str]
    started: list[Any] = field(default_factory=list)
    etcd_urls: dict[str, str] = field(default_factory=dict)
    kube: KubeApiServer | None = None  # the baseline, once started (to create more namespaces on)

    def _etcd(self, name: str) -> Etcd:
        etcd = Etcd(self.root / name / "etcd", free_port(), free_port(), self.root / "log" / f"{name}-etcd.log")
        self.started.append(etcd.start())
        self.etcd_urls[name] = etcd.url
        return etcd

    def start(self, *, ours: bool = True, baseline: bool = True) -> list[Target]:
        pki = bench_pki(self.root / "pki")
        crt, key = pki.cert("admin")
        targets = []
        if ours:
            etcd = self._etcd("ours")
            server = ApiServer(pki, etcd.url, free_port(), self.root / "log" / "vc-apiserver.log",
                               extra_args=["--enable-reconciler", "false", "--v", "0", *OURS_ARGS])
            self.started.append(server.start(timeout=60))
            assert server.proc is not None and etcd.proc is not None
            targets.append(Target("ours", "vc-apiserver, direct", server.url, pki.ca, crt, key,
                                  write_kubeconfig(self.root / "ours.kubeconfig", pki.kubeconfig(server.url)),
                                  {"server": server.proc.pid or 0, "etcd": etcd.proc.pid or 0}))
        if baseline:
            etcd = self._etcd("baseline")
            kube = self.kube = KubeApiServer(pki, etcd.url, free_port(), self.root / "log" / "kube-apiserver.log")
            self.started.append(kube.start())
            kube.install_crd()
            kube.create_namespaces(self.namespaces)
            assert kube.proc is not None and etcd.proc is not None
            targets.append(Target("baseline", "kube-apiserver + CRD", kube.url, pki.ca, crt, key,
                                  write_kubeconfig(self.root / "baseline.kubeconfig", pki.kubeconfig(kube.url)),
                                  {"server": kube.proc.pid or 0, "etcd": etcd.proc.pid or 0}))
        return targets

    def stop(self) -> None:
        for proc in reversed(self.started):
            try:
                proc.stop()
            except Exception as e:  # keep stopping the others
                print(f"stopping {proc}: {e}")
        self.started.clear()


def target_from_kubeconfig(name: str, kubeconfig: Path, workdir: Path, store_of: str) -> Target:
    """An extra target (e.g. ours through the host aggregator) from a kubeconfig with inline
    client-certificate data; it serves the objects of ``store_of`` and so creates none itself."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    files = {}
    for stem, data in (("ca.crt", cluster["certificate-authority-data"]), ("tls.crt", user["client-certificate-data"]),
                       ("tls.key", user["client-key-data"])):
        path = workdir / "targets" / name / stem
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        files[stem] = path
    return Target(name, f"{name} (from {kubeconfig})", cluster["server"], files["ca.crt"], files["tls.crt"],
                  files["tls.key"], kubeconfig, store_of=store_of)
