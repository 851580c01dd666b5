"""Real-node benchmark: the production path on real kubelets (hack/realnodes.py), against its floors.

- **Control plane as pods**: VirtualCluster create → Ready with the ``pods`` runtime on the real
  control-plane node, against the floor: the same four components with the same images, flags and
  probes (the very objects the runtime applied, dumped from the host after a round, Service IPs kept),
  started by hand in dependency order on the same kubelet, each only once what it needs answers, polled
  every 0.2 s: etcd until its pod is Ready, the apiserver until ``/readyz`` answers at the same endpoint,
  then the controller-manager, where ours says Ready. The difference is what vc-apiserver adds: PKI,
  its passes, its readiness checks, the tenant's bootstrap.
- **Wake**: a hibernated tenant (every pod gone, its etcd volume kept) woken → Ready.
- **Promote**: the real worker added to a Ready tenant → a tenant pod that waited for a node Running
  on it (drain in the host, the agent's join, the kubelet's restart, registration, scheduling).
- **Release**: the worker taken out of the tenant → a host pod bound to it Running again.
- **Applications on a shared slice** (:mod:`.sliceapps`): a Service answering by name, 20 pods behind a
  Service, logs and exec, against the same in a host namespace.

Rounds are sequential on one lab (5 by default); p50 and the worst round (the p99 of so few) are reported, in seconds.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hack.harness import wait_until
from hack.stack import Stack, StackPorts
from reconciler.runtime.base import FIELD_MANAGER
from reconciler.runtime.pods import COMPONENT, MANAGED_BY, OWNER

from . import sliceapps
from .stats import Ratio

NS = "bench-real"
KINDS = ("secrets", "services", "statefulsets", "deployments")
BUSYBOX = "docker.io/library/busybox:1.36"


def _json(stack: Stack, *args: str) -> Any:
    return json.loads(stack.host.kubectl(*args, "-o", "json").stdout)


def _vc(name: str, nodes: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"promoteResources": {"nodes": nodes}} if nodes else {}
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _ready(stack: Stack, name: str) -> bool:
    vc = _json(stack, "get", "vc", name, "-n", NS)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (vc.get("status") or {}).get("conditions", []))


def _timed(what: str, check: Callable[[], bool], timeout: float = 300.0) -> float:
    start = time.monotonic()
    wait_until(check, timeout, what, interval=0.2)
    return time.monotonic() - start


def _dump(stack: Stack, name: str) -> list[dict[str, Any]]:
    """The host objects the runtime applied for ``name``, as applyable manifests, no longer marked as
    vc-apiserver's (its orphan check would rightly remove them: their VirtualCluster is gone)."""
    out = []
    for kind in KINDS:
        for obj in _json(stack, "get", kind, "-n", NS, "-l", f"{OWNER}={name}")["items"]:
            meta = obj["metadata"]
            obj["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
            obj.pop("status", None)  # a Service keeps its IP, which the components' flags and kubeconfigs name
            out.append(obj)
    mark = json.dumps({MANAGED_BY: FIELD_MANAGER})[1:-1]
    return list(json.loads(json.dumps(out).replace(mark, json.dumps({MANAGED_BY: "bench-floor"})[1:-1])))


def _pods_ready(stack: Stack, name: str, expected: int) -> bool:
    pods = _json(stack, "get", "pods", "-n", NS, "-l", f"{OWNER}={name}")["items"]
    return len(pods) >= expected and all(
        p.get("status", {}).get("phase") == "Running" and all(c.get("ready") for c in p["status"].get("containerStatuses", []))
        for p in pods if not p["metadata"].get("deletionTimestamp"))


def _answers(endpoint: str) -> Callable[[], bool]:
    import ssl
    import urllib.request
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def check() -> bool:
        try:
            with urllib.request.urlopen(endpoint + "/readyz", timeout=2, context=ctx) as resp:
                return resp.status == 200
        except OSError as e:  # an answer of 401/403 is an answer: readyz needs no credentials here
            return getattr(e, "code", 0) in (401, 403)
    return check


def _component(manifest: dict[str, Any]) -> str:
    return str(manifest["metadata"]["labels"].get(COMPONENT, ""))


def _hibernated(stack: Stack, name: str, asleep: bool) -> None:
    stack.host.kubectl("patch", "vc", name, "-n", NS, "--type=merge", "-p",
                       json.dumps({"spec": {"hibernation": {"hibernated": asleep}}}))


def control_plane_round(stack: Stack, name: str) -> tuple[float, float, float]:
    """(ours, wake, floor) seconds for one tenant control plane as pods."""
    k = stack.host.kubectl
    k("create", "-f", "-", input=json.dumps(_vc(name, [])))
    ours = _timed(f"{name} Ready", lambda: _ready(stack, name))
    endpoint = _json(stack, "get", "vc", name, "-n", NS)["status"]["controlPlaneEndpoint"]
    manifests = _dump(stack, name)
    _hibernated(stack, name, True)
    wait_until(lambda: not _json(stack, "get", "pods", "-n", NS, "-l", f"{OWNER}={name}")["items"], 180,
               f"{name} asleep", interval=0.2)
    _hibernated(stack, name, False)
    wake = _timed(f"{name} awake", lambda: _ready(stack, name))
    k("delete", "vc", name, "-n", NS, "--wait=true", "--timeout=180s")

    def apply(*components: str, kinds: tuple[str, ...] = ("Deployment", "StatefulSet")) -> None:
        items = [m for m in manifests if m["kind"] in kinds and (not components or _component(m) in components)]
        k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    start = time.monotonic()
    apply(kinds=("Secret", "Service"))
    apply("etcd")
    wait_until(lambda: _pods_ready(stack, name, 1), 300, f"floor etcd of {name}", interval=0.2)
    apply("apiserver")
    wait_until(_answers(endpoint), 120, f"floor apiserver of {name}", interval=0.2)
    apply("controller-manager", "scheduler")
    floor = time.monotonic() - start
    for kind in ("deployments", "statefulsets", "services", "secrets", "pvc"):
        k("delete", kind, "-n", NS, "-l", f"{OWNER}={name}", "--wait=true", "--timeout=120s")
    return ours, wake, floor


PROMOTION_STEPS = ("cordoned in the host", "kubelet re-pointed", "registered in the tenant", "Ready in the tenant",
                   "pod scheduled", "pod Running")


def promotion_round(stack: Stack, name: str, tenant_kubeconfig: Path) -> tuple[float, float, dict[str, float]]:
    """(promote → tenant pod Running, release → host pod Running) seconds, and when each step of the
    promotion was first seen (seconds from the patch), watched from outside every 0.2 s or so: the host
    Node cordoned (claim, cordon; the drain follows), the kubelet's kubeconfig pointing at the tenant (the
    agent's join), the Node in the tenant (the kubelet restarted and registered), Ready there, the waiting
    pod bound (the tenant scheduler), Running (the container started)."""
    worker = stack.lab().nodes()[1]
    k = stack.host.kubectl
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "waiting"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "waiting"}},
                           "template": {"metadata": {"labels": {"app": "waiting"}}, "spec": {
                               "terminationGracePeriodSeconds": 1,
                               "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}]}}}}
    k("apply", "-f", "-", input=json.dumps(deployment), kubeconfig=tenant_kubeconfig)

    host_server = str(yaml.safe_load(worker.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
    seen: dict[str, float] = {}

    def steps() -> dict[str, bool]:
        node = _json(stack, "get", "node", worker.name)
        server = str(yaml.safe_load(worker.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
        tenant_nodes = {n["metadata"]["name"]: n for n in json.loads(
            k("get", "nodes", "-o", "json", kubeconfig=tenant_kubeconfig).stdout)["items"]}
        pods = json.loads(k("get", "pods", "-l", "app=waiting", "-o", "json", kubeconfig=tenant_kubeconfig).stdout)
        mine = [p for p in pods["items"] if p["spec"].get("nodeName") == worker.name]
        tenant_node = tenant_nodes.get(worker.name) or {}
        return dict(zip(PROMOTION_STEPS, (
            bool(node["spec"].get("unschedulable")), server != host_server, bool(tenant_node),
            any(c["type"] == "Ready" and c["status"] == "True" for c in tenant_node.get("status", {}).get("conditions", [])),
            bool(mine), any(p["status"].get("phase") == "Running" for p in mine)), strict=True))

    start = time.monotonic()

    def tenant_pod_running() -> bool:
        for step, done in steps().items():
            if done:
                seen.setdefault(step, round(time.monotonic() - start, 2))
        return "pod Running" in seen
    k("patch", "vc", name, "-n", NS, "--type=merge", "-p",
      json.dumps({"spec": {"promoteResources": {"nodes": [worker.name]}}}))
    wait_until(tenant_pod_running, 300, "a tenant pod Running on the promoted node", interval=0.1)
    promote = time.monotonic() - start
    k("delete", "deployment", "waiting", "--wait=false", kubeconfig=tenant_kubeconfig)

    home = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"home-{name}", "namespace": NS},
            "spec": {"nodeName": worker.name, "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}]}}
    k("patch", "vc", name, "-n", NS, "--type=json", "-p", json.dumps([{"op": "remove", "path": "/spec/promoteResources"}]))
    start = time.monotonic()
    k("apply", "-f", "-", input=json.dumps(home))

    def host_pod_running() -> bool:
        pod = _json(stack, "get", "pod", f"home-{name}", "-n", NS)
        return pod["status"].get("phase") == "Running"
    wait_until(host_pod_running, 300, "a host pod Running on the released node", interval=0.2)
    release = time.monotonic() - start
    k("delete", "pod", f"home-{name}", "-n", NS, "--wait=false")
    return promote, release, seen


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2), "rounds": len(values)}


def run(workdir: Path, rounds: int = 5, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every family of the lab on one lab (set up once)."""
    stack = Stack(workdir, StackPorts.free(), runtime="pods", real_nodes=2,
                  extra_args=["--leader-elect-lease-duration", "5"])
    started = time.monotonic()
    try:
        stack.up(nodes=2, say=log)
        setup = time.monotonic() - started
        stack.host.kubectl("create", "namespace", NS)
        ours, wake, floor, promote, release = [], [], [], [], []
        promotion_steps: dict[str, list[float]] = {}
        for i in range(rounds):
            o, w, f = control_plane_round(stack, f"cp-{i}")
            ours.append(o)
            wake.append(w)
            floor.append(f)
            log(f"realnodes: control plane round {i}: create → Ready ours {o:.1f} s, floor {f:.1f} s; "
                f"wake → Ready {w:.1f} s")
        for i in range(rounds):
            name = f"promo-{i}"
            stack.host.kubectl("create", "-f", "-", input=json.dumps(_vc(name, [])))
            wait_until(lambda n=name: _ready(stack, n), 300, f"{name} Ready", interval=0.2)  # type: ignore[misc]
            raw = stack.host.kubectl("get", "--raw",
                                     f"/apis/kosmos.io/v1alpha1/namespaces/{NS}/virtualclusters/{name}/kubeconfig").stdout
            kubeconfig = workdir / f"{name}.kubeconfig"
            kubeconfig.write_text(raw)
            p, r, seen = promotion_round(stack, name, kubeconfig)
            promote.append(p)
            release.append(r)
            for step, at in seen.items():
                promotion_steps.setdefault(step, []).append(at)
            log(f"realnodes: promotion round {i}: promote → tenant pod Running {p:.1f} s, "
                f"release → host pod Running {r:.1f} s")
            stack.host.kubectl("delete", "vc", name, "-n", NS, "--wait=true", "--timeout=180s")
        slice_apps = sliceapps.run(stack, workdir, rounds, log)
    finally:
        stack.down()
    return {"lab_setup_seconds": round(setup, 1),
            "control_plane": {"ours": _summary(ours), "floor": _summary(floor),
                              "ratio_p50": round(statistics.median(floor) / statistics.median(ours), 2)},
            "wake_to_ready": _summary(wake),
            "promote_to_tenant_pod_running": _summary(promote),
            "promotion_steps_p50": {step: round(statistics.median(promotion_steps[step]), 2)
                                    for step in PROMOTION_STEPS if step in promotion_steps},
            "release_to_host_pod_running": _summary(release),
            "slice_apps": slice_apps}


def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bar: the floor's create → Ready as pods / ours (already turned so that > 1: ours is faster)."""
    out: list[Ratio] = [("control plane as pods on real nodes, create → Ready", r["control_plane"]["ratio_p50"], None)]
    for key, s in (r.get("slice_apps") or {}).items():  # turned so that > 1: ours is faster
        if s.get("ratio"):
            out.append((f"shared slice, {key.replace('_', ' ')}", round(1 / s["ratio"], 2), None))
    return out


def render(result: dict[str, Any]) -> str:
    cp = result["control_plane"]
    return "\n".join([
        f"real nodes (lab set-up {result['lab_setup_seconds']} s; seconds, p50 / worst of {cp['ours']['rounds']})",
        f"  create → Ready, pods runtime     ours {cp['ours']['p50']} / {cp['ours']['max']}   "
        f"floor {cp['floor']['p50']} / {cp['floor']['max']}   ratio {cp['ratio_p50']}x",
        f"  wake → Ready, pods runtime       {result['wake_to_ready']['p50']} / {result['wake_to_ready']['max']}",
        f"  promote → tenant pod Running     {result['promote_to_tenant_pod_running']['p50']} / "
        f"{result['promote_to_tenant_pod_running']['max']}",
        "  promotion, each step first seen (p50, seconds from the patch): " + ", ".join(
            f"{step} {at}" for step, at in result.get("promotion_steps_p50", {}).items()),
        f"  release → host pod Running       {result['release_to_host_pod_running']['p50']} / "
        f"{result['release_to_host_pod_running']['max']}",
        *([sliceapps.render(result["slice_apps"])] if result.get("slice_apps") else []),
    ])
