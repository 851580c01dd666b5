"""``make metering-chart``: docs/metering.png, drawn from a real run of the playground.

Starts the playground if it is not up (as ``make up``), then plays a short day of two tenants in
namespace ``metering-demo``: ``alpha`` (a control plane alone) and ``beta`` (with a shared slice of 2 cpu
and 4Gi running a small Deployment). Credentials are fetched, ``alpha`` hibernates and wakes. Meanwhile
vc-apiserver's ``/metrics`` is read every two seconds; the ``virtualcluster_*`` series are saved in
docs/metering.json and charted as the Grafana dashboard (apiservice/deploy/grafana) charts them. Both
tenants are deleted at the end.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from hack.harness import REPO
from hack.playground import PORTS, stack
from hack.stack import Stack

NS = "metering-demo"
SAMPLE_EVERY = 2.0
SERIES = re.compile(r'^(virtualcluster_\w+)\{([^}]*)\} (\S+)$')
OUT = REPO / "docs" / "metering.png"
DATA = REPO / "docs" / "metering.json"


def scrape(s: Stack) -> dict[str, dict[str, float]]:
    """metric → "namespace/name[/phase]" → value, for this namespace's VirtualClusters."""
    ctx = ssl.create_default_context(cafile=str(s.root / "serving" / "ca.crt"))
    ctx.load_cert_chain(str(s.host.pki.path("admin.crt")), str(s.host.pki.path("admin.key")))
    with urllib.request.urlopen(f"https://127.0.0.1:{PORTS.vc_apiserver}/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = SERIES.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("namespace") != NS:
            continue
        key = labels["name"] + (f"/{labels['phase']}" if "phase" in labels else "")
        out.setdefault(m.group(1), {})[key] = float(m.group(3))
    return out


def kubectl(s: Stack, *args: str, input: str | None = None, kubeconfig: Path | None = None) -> str:
    return s.host.kubectl(*args, input=input, kubeconfig=kubeconfig).stdout


def vc(name: str, spec: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
                       "metadata": {"name": name, "namespace": NS}, "spec": spec})


def play(s: Stack, work: Path) -> None:
    """The day the chart shows (about two minutes)."""
    s.host.kubectl("create", "namespace", NS, check=False)  # left by an earlier run: reused
    kubectl(s, "create", "-f", "-", input=vc("alpha", {}))
    kubectl(s, "create", "-f", "-", input=vc("beta", {"promoteResources": {"resources": {"cpu": "2", "memory": "4Gi"}}}))
    kubectl(s, "wait", "vc/alpha", "vc/beta", "-n", NS, "--for=condition=Ready", "--timeout=180s")
    path = "/apis/kosmos.io/v1alpha1/namespaces/{ns}/virtualclusters/{name}/kubeconfig"
    for name, times in (("alpha", 3), ("beta", 1)):
        for _ in range(times):
            (work / f"{name}.kubeconfig").write_text(kubectl(s, "get", "--raw", path.format(ns=NS, name=name)))
    beta = work / "beta.kubeconfig"
    kubectl(s, "create", "deployment", "web", "--image=docker.io/library/busybox:1.36", "--replicas=0",
            kubeconfig=beta)
    kubectl(s, "set", "resources", "deployment", "web", "--requests=cpu=250m,memory=256Mi", kubeconfig=beta)
    kubectl(s, "scale", "deployment", "web", "--replicas=4", kubeconfig=beta)
    time.sleep(20)
    kubectl(s, "patch", "vc", "alpha", "-n", NS, "--type", "merge", "-p", '{"spec":{"hibernation":{"hibernated":true}}}')
    kubectl(s, "wait", "vc/alpha", "-n", NS, "--for=jsonpath={.status.phase}=Hibernated", "--timeout=120s")
    time.sleep(30)
    kubectl(s, "patch", "vc", "alpha", "-n", NS, "--type", "merge", "-p", '{"spec":{"hibernation":{"hibernated":false}}}')
    kubectl(s, "wait", "vc/alpha", "-n", NS, "--for=condition=Ready", "--timeout=180s")
    kubectl(s, "scale", "deployment", "web", "--replicas=1", kubeconfig=beta)
    time.sleep(20)


def chart(samples: list[tuple[float, dict[str, dict[str, float]]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True)

    def line(ax: Any, metric: str, key: str, label: str, scale: float = 1.0, rate: bool = False) -> None:
        points = [(t, s.get(metric, {}).get(key)) for t, s in samples]
        points = [(t, v) for t, v in points if v is not None]
        if rate:
            points = [(t1, max(v1 - v0, 0.0) / (t1 - t0)) for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False)]
        if points:
            ax.plot([t for t, _ in points], [v / scale for _, v in points], label=label)

    for name in ("alpha", "beta"):
        line(axes[0][0], "virtualcluster_control_plane_memory_bytes", name, name, 2**20)
        line(axes[0][1], "virtualcluster_control_plane_cpu_seconds_total", name, name, rate=True)
        awake = [(t, 0.0 if s.get("virtualcluster_phase", {}).get(f"{name}/Hibernated") == 1.0 else 1.0)
                 for t, s in samples if s.get("virtualcluster_phase")]
        axes[1][1].step([t for t, _ in awake], [v + (0.02 if name == "beta" else 0.0) for _, v in awake], where="post",
                        label=name)
    line(axes[1][0], "virtualcluster_slice_cpu_allocated_cores", "beta", "beta: allocated")
    line(axes[1][0], "virtualcluster_slice_cpu_requested_cores", "beta", "beta: requested by its pods")
    titles = ("Control-plane memory (MiB)", "Control-plane cpu (cores)", "Shared slice cpu (cores)",
              "Awake (1) or hibernated (0)")
    for ax, title in zip((axes[0][0], axes[0][1], axes[1][0], axes[1][1]), titles, strict=True):
        ax.set_title(title)
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("seconds")
    fig.suptitle("virtualcluster_* metrics from one playground run (make metering-chart)")
    fig.tight_layout()
    fig.savefig(OUT, dpi=80)


def main() -> None:
    import tempfile

    s = stack()
    s.up(say=print)
    samples: list[tuple[float, dict[str, dict[str, float]]]] = []
    done = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic() - start, scrape(s)))
            done.wait(SAMPLE_EVERY)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with tempfile.TemporaryDirectory() as work:
            play(s, Path(work))
    finally:
        done.set()
        sampler.join()
        s.host.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        s.host.kubectl("delete", "vc", "--all", "-n", NS, "--wait=false", check=False)
    DATA.write_text(json.dumps([{"t": round(t, 1), "series": v} for t, v in samples]) + "\n")
    chart(samples)
    print(f"{len(samples)} scrapes over {samples[-1][0]:.0f}s: {OUT.relative_to(REPO)}, {DATA.relative_to(REPO)}")


if __name__ == "__main__":
    main()
