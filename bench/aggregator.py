"""The optional third target: ours as users reach it, through a host kube-apiserver's aggregator.

The host is the harness's :class:`~hack.harness.HostCluster` reduced to etcd + kube-apiserver
(its controller-manager and kwok would only add noise). The registration is the product's own:
``python -m apiservice install --mode local``. The server behind the APIService is a second
vc-apiserver on *ours'* etcd, configured as in production (delegated authentication and
authorization against the host); it serves the objects ``ours`` created, so this target creates
none and its memory is not reported. Its cost while idle (its watch cache follows ours' writes)
is charged to ``ours``' rounds, a small handicap stated in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import os
import subprocess
import sys

from hack.harness import REPO, ApiServer, HostCluster, HostPki, Pki, free_port, wait_until, write_kubeconfig

from .servers import Lab, Target, http_get, target_from_kubeconfig

NAME = "via-aggregator"


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


def start_via_aggregator(lab: Lab, ours_etcd_url: str, namespaces: list[str]) -> Target:
    """Host up, APIService installed and Available, namespaces created on the host; the Target."""
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
                                 "--enable-reconciler", "false", "--v", "0"])
    lab.started.append(twin)
    twin.start(timeout=90)
    out, err = install.communicate(timeout=180)
    if install.returncode != 0:
        raise RuntimeError(f"python -m apiservice install --mode local failed:\n{out}\n{err}")
    host.kubectl("apply", "-f", "-", input="\n---\n".join(
        f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}" for ns in namespaces))
    target = target_from_kubeconfig(NAME, host.admin_kubeconfig, lab.root, store_of="ours")
    ctx = target.ssl_context()
    wait_until(lambda: http_get(host.url + "/apis/kosmos.io/v1alpha1/virtualclusters?limit=1", ctx)[0] == 200, 60,
               "virtualclusters through the aggregator")
    assert twin.proc is not None and host.procs["kube-apiserver"].pid is not None
    return Target(target.name, "vc-apiserver through the host's aggregator", target.url, target.ca, target.cert,
                  target.key, target.kubeconfig,
                  {"server": twin.proc.pid or 0, "aggregator": host.procs["kube-apiserver"].pid or 0},
                  store_of="ours")

