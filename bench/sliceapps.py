"""Applications on a shared slice, on the real-node lab, against the same objects made directly in a host
namespace (the floor: what the host's own controllers, DNS and kubelets do with them, with no tenant and
no syncer in between).

- **Service → answering by name**: a client pod already polls the name every 50 ms (``wget``); the Service
  is created, and the moment is the client's own first answer (read from ``/proc/uptime``, which the lab's
  nodes share with this machine), not when a poll from here notices.
- **20 pods behind a Service, 0 → all endpoints**: the Deployment scaled from 0 to 20 until the Service's
  EndpointSlices in the host list 20 ready endpoints: ours, the host mirror of the tenant's (what the host's
  proxies route); the floor, the host's own.
- **logs and exec round trips**: ``kubectl logs`` and ``kubectl exec -- true`` of a running pod, through the
  tenant (its apiserver, the slice's kubelet API, the host apiserver, the kubelet) against the host pod
  directly; the median of ten, kubectl's own start included on both sides.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from hack.harness import binary, wait_until
from hack.realnodes import CONTROL_PLANE_ROLE, REAL_NODE_LABEL
from hack.stack import Stack
from reconciler.shared import names

BUSYBOX = "docker.io/library/busybox:1.36"
FLOOR_NS = "bench-slice-floor"
VC = "apps"
VC_NS = "bench-slice"
SLICE = {"cpu": "1", "memory": "1Gi"}
PODS = 20
REQUESTS = {"cpu": "10m", "memory": "16Mi"}
ROUND_TRIPS = 10
# The floor's pods run where the slice's do: the lab's real nodes.
ON_REAL_NODES = {"nodeSelector": {REAL_NODE_LABEL: "true"},
                 "tolerations": [{"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}]}


class Kubectl:
    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace

    def argv(self, *args: str) -> list[str]:
        return [str(binary("kubectl")), "--kubeconfig", str(self.kubeconfig), "-n", self.namespace, *args]

    def __call__(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        proc = subprocess.run(self.argv(*args), input=input, capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))

    def apply(self, *objs: dict[str, Any]) -> None:
        self("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def web(name: str, replicas: int, placement: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {
                    **placement, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "httpd", "image": BUSYBOX, "resources": {"requests": REQUESTS},
                                    "command": ["sh", "-c", "echo up; mkdir -p /www && echo ok > /www/index.html && "
                                                            "exec httpd -f -p 8080 -h /www"],
                                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}}}


def service(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": 8080}]}}


def client(placement: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
            "spec": {**placement, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "36000"],
                                     "resources": {"requests": REQUESTS}}]}}


def ready_endpoints(host: Kubectl, service_name: str) -> int:
    slices = host.json("get", "endpointslices", "-l", f"kubernetes.io/service-name={service_name}")["items"]
    return sum(1 for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready"))


class Side:
    """One side of the comparison: where its objects are made, and where the host sees them."""

    def __init__(self, k: Kubectl, host: Kubectl, placement: dict[str, Any], mirrored: bool) -> None:
        self.k, self.host, self.placement, self.mirrored = k, host, placement, mirrored

    def host_name(self, name: str) -> str:
        return names.host_name(self.k.namespace, name) if self.mirrored else name

    def setup(self) -> None:
        self.k.apply(web("web", 1, self.placement), web("many", 0, self.placement), service("many", "many"),
                     client(self.placement))
        self.k("rollout", "status", "deployment/web", "--timeout=180s", timeout=200)
        self.k("wait", "pod/client", "--for=condition=Ready", "--timeout=180s", timeout=200)

    def service_answers(self, i: int) -> float:
        name = f"named-{i}"
        poll = (f"until wget -q -O /dev/null http://{name}/ 2>/dev/null; do usleep 50000; done; "
                "cut -d' ' -f1 /proc/uptime")
        proc = subprocess.Popen(self.k.argv("exec", "client", "--", "sh", "-c", poll), stdout=subprocess.PIPE,
                                text=True)
        time.sleep(1.0)  # the poll runs before the Service exists
        start = uptime()
        self.k.apply(service(name, "web"))
        out, _ = proc.communicate(timeout=120)
        self.k("delete", "service", name, "--wait=false")
        return float(out.split()[-1]) - start

    def scale_out(self) -> float:
        host_service = self.host_name("many")
        start = time.monotonic()
        self.k("scale", "deployment/many", f"--replicas={PODS}")
        wait_until(lambda: ready_endpoints(self.host, host_service) >= PODS, 300,
                   f"{PODS} ready endpoints of {host_service}", interval=0.2)
        took = time.monotonic() - start
        self.k("scale", "deployment/many", "--replicas=0")
        wait_until(lambda: ready_endpoints(self.host, host_service) == 0, 300, "no endpoints left", interval=0.5)
        return took

    def round_trips(self) -> tuple[float, float]:
        pod = self.k.json("get", "pods", "-l", "app=web")["items"][0]["metadata"]["name"]
        logs, execs = [], []
        for _ in range(ROUND_TRIPS):
            started = time.monotonic()
            self.k("logs", pod)
            logs.append(time.monotonic() - started)
            started = time.monotonic()
            self.k("exec", pod, "--", "true")
            execs.append(time.monotonic() - started)
        return statistics.median(logs), statistics.median(execs)


def _summary(ours: list[float], floor: list[float]) -> dict[str, Any]:
    o, f = statistics.median(ours), statistics.median(floor)
    return {"ours_p50": round(o, 3), "ours_max": round(max(ours), 3), "floor_p50": round(f, 3),
            "floor_max": round(max(floor), 3), "ratio": round(o / f, 2) if f else None, "rounds": len(ours)}


def run(stack: Stack, workdir: Path, rounds: int, log: Any = print) -> dict[str, Any]:
    """The measurements above, ``rounds`` of each, on a lab that runs."""
    admin = Kubectl(stack.kubeconfig, VC_NS)
    admin("create", "namespace", VC_NS)
    admin("create", "namespace", FLOOR_NS)
    admin("create", "-f", "-", input=json.dumps({"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
                                                 "metadata": {"name": VC, "namespace": VC_NS},
                                                 "spec": {"promoteResources": {"resources": SLICE}}}))
    admin("wait", f"vc/{VC}", "--for=condition=Ready", "--timeout=300s", timeout=320)
    vc = admin.json("get", "vc", VC)
    kubeconfig = workdir / "slice.kubeconfig"
    kubeconfig.write_text(admin("get", "--raw", f"/apis/kosmos.io/v1alpha1/namespaces/{VC_NS}/virtualclusters/"
                                                f"{VC}/kubeconfig"))
    tenant = Kubectl(kubeconfig, "default")
    tenant("rollout", "status", "deployment/coredns", "-n", "kube-system", "--timeout=180s", timeout=200)
    ours = Side(tenant, Kubectl(stack.kubeconfig, names.host_namespace(vc)), {}, mirrored=True)
    floor_k = Kubectl(stack.kubeconfig, FLOOR_NS)
    floor = Side(floor_k, floor_k, ON_REAL_NODES, mirrored=False)
    results: dict[str, tuple[list[float], list[float]]] = {"service_answers_by_name": ([], []),
                                                          f"scale_0_to_{PODS}_endpoints": ([], []),
                                                          "logs_round_trip": ([], []), "exec_round_trip": ([], [])}
    for side in (ours, floor):
        side.setup()
    for i in range(rounds):
        for j, side in enumerate((ours, floor)):
            results["service_answers_by_name"][j].append(side.service_answers(i))
            results[f"scale_0_to_{PODS}_endpoints"][j].append(side.scale_out())
            logs, execs = side.round_trips()
            results["logs_round_trip"][j].append(logs)
            results["exec_round_trip"][j].append(execs)
        log("sliceapps: round {}: {}".format(i, ", ".join(
            f"{k} ours {v[0][-1]:.2f} s floor {v[1][-1]:.2f} s" for k, v in results.items())))
    admin("delete", "vc", VC, "--wait=true", "--timeout=180s", timeout=200)
    admin("delete", "namespace", FLOOR_NS, "--wait=false")
    return {k: _summary(*v) for k, v in results.items()}


def render(result: dict[str, Any]) -> str:
    lines = ["applications on a shared slice (seconds, p50 / worst; ours / the same in a host namespace)"]
    for key, r in result.items():
        lines.append(f"  {key.replace('_', ' '):34} ours {r['ours_p50']} / {r['ours_max']}   "
                     f"floor {r['floor_p50']} / {r['floor_max']}   ratio {r['ratio']}x")
    return "\n".join(lines)
