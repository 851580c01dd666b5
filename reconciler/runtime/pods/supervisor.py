"""What the ``pods`` runtime waits for on the host, and what it reads there of a control plane's health.

The host's controllers run the pods; this only scales their workloads, deletes what is a tenant's and
polls until the host has done it. Readiness is the tenant apiserver's ``/readyz`` at the endpoint
users get, never pod status: pods can be Running while nothing answers, and are read only to say why
it does not (:mod:`.status`).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from apiserver.kubeclient.client import HostError, HostUnavailable
from certs.tenant import TenantPki
from reconciler.runtime.base import ControlPlaneState, Obj, RuntimeFailure
from reconciler.runtime.pods.host import Host
from reconciler.runtime.pods.hostobjects import PKI_HASH, Plan, selector
from reconciler.runtime.pods.startorder import replicas
from reconciler.runtime.pods.status import all_running, pod_problem, pods_summary
from reconciler.tenantapi import TenantClients

__all__ = ["OWNED_KINDS", "delete_and_wait", "remove_all", "rolled_out", "scale_to_zero", "scheduler_scaled_up",
           "state",
           "wait_finished"]

# everything a teardown waits to see gone, workloads first (so nothing is recreated)
OWNED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "ControllerRevision", "Pod", "Service", "Secret",
               "PersistentVolumeClaim")
WORKLOADS = ("Deployment", "StatefulSet")
POLL = 0.5  # seconds between two looks at what the host is doing


async def state(host: Host, clients: TenantClients, plan: Plan, pki: TenantPki, endpoint: str,
                port: int) -> ControlPlaneState:
    """Ready only when the tenant apiserver says so at the endpoint; otherwise say what is known."""
    client = await clients.get(plan.namespace, plan.name, pki, endpoint)
    try:
        # An apiserver pod that is being replaced fails its shutdown check while it still serves (for
        # as long as its Service takes to stop sending it requests): it answers, so it counts.
        await client.request("GET", "/readyz", params={"exclude": "shutdown"}, timeout=3)
        return ControlPlaneState(True, "ControlPlaneRunning", f"tenant apiserver ready at {endpoint}", endpoint, port)
    except HostError as e:
        answer = f"the tenant apiserver at {endpoint} is not ready yet ({e.code}: {e.message[:200]})"
    except HostUnavailable as e:
        answer = f"the tenant apiserver did not answer at {endpoint} ({_cause(e)})"
    pods = await host.list("Pod", plan.namespace, plan.selector)
    reason, summary = pods_summary(pods)
    return ControlPlaneState(False, reason, f"{answer}; {summary}", endpoint, port, unanswered=all_running(pods))


async def rolled_out(host: Host, plan: Plan) -> bool:
    """Whether the apiserver and controller-manager run only pods of their Deployments' current templates
    (after a Secret changed: a rotated key), none of the old ones still going."""
    for component in ("apiserver", "controller-manager"):
        deployment = await host.get("Deployment", plan.namespace, plan.object_name(component))
        if deployment is None:
            return False
        spec, st = deployment.get("spec") or {}, deployment.get("status") or {}
        want = spec.get("replicas", 1)
        if st.get("observedGeneration", 0) < deployment["metadata"].get("generation", 0):
            return False
        if not st.get("updatedReplicas", 0) == st.get("replicas", 0) == st.get("availableReplicas", 0) == want:
            return False
        pki_hash = ((spec.get("template") or {}).get("metadata") or {}).get("annotations", {}).get(PKI_HASH)
        for pod in await host.list("Pod", plan.namespace, selector(plan.name, component)):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(PKI_HASH) != pki_hash:
                return False
    return True


async def scheduler_scaled_up(host: Host, plan: Plan) -> bool:
    """Whether the tenant's scheduler runs: the pods runtime's pid file (hibernation scales it to zero)."""
    return replicas(await host.get("Deployment", plan.namespace, plan.object_name("scheduler"))) > 0


async def scale_to_zero(host: Host, namespace: str, name: str) -> bool:
    """Scale every workload of a tenant to zero; True once none of its pods is left."""
    owned = selector(name)
    for kind in WORKLOADS:
        for obj in await host.list(kind, namespace, owned):
            if (obj.get("spec") or {}).get("replicas") != 0:
                await host.scale_to_zero(kind, namespace, obj["metadata"]["name"])
    return not await host.list("Pod", namespace, owned)


async def remove_all(host: Host, namespace: str, name: str, timeout: float) -> None:
    """Delete a tenant's objects, workloads first (so nothing is recreated), until nothing is left or
    ``timeout`` seconds are up (RuntimeFailure)."""
    owned = selector(name)
    deadline = time.monotonic() + timeout
    while True:
        left = [(kind, obj) for kind in OWNED_KINDS for obj in await host.list(kind, namespace, owned)]
        if not left:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{k} {o['metadata']['name']}" for k, o in left[:10])
            raise RuntimeFailure("TeardownIncomplete", f"after {timeout:.0f}s these still exist in {namespace}: {names}")
        for kind, obj in left:
            if not obj["metadata"].get("deletionTimestamp"):
                await host.delete(kind, namespace, obj["metadata"]["name"])
        await asyncio.sleep(POLL)


async def delete_and_wait(host: Host, kind: str, namespace: str, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while await host.get(kind, namespace, name) is not None:
        if time.monotonic() > deadline:
            raise RuntimeFailure("TeardownIncomplete", f"{kind} {namespace}/{name} is still there after {timeout:.0f}s")
        await host.delete(kind, namespace, name)
        await asyncio.sleep(POLL)


async def wait_finished(host: Host, namespace: str, name: str, reason: str, timeout: float) -> Obj:
    """A pod run to its end (Succeeded or Failed); RuntimeFailure (``reason``) if it cannot get there, or
    not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        pod = await host.get("Pod", namespace, name)
        if pod is None:
            raise RuntimeFailure(reason, f"pod {namespace}/{name} was deleted before it finished")
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return pod
        problem, failing = pod_problem(pod)
        if failing or time.monotonic() > deadline:
            raise RuntimeFailure(reason, f"pod {namespace}/{name} did not finish: {problem}")
        await asyncio.sleep(POLL)


def _cause(e: HostUnavailable) -> str:
    """The short why of a failed connection: refused, timed out, no route, TLS."""
    cause = e.__cause__
    if isinstance(cause, TimeoutError):
        return "no answer in time"
    if isinstance(cause, aiohttp.ClientConnectorError):
        return f"{type(cause.os_error).__name__}: {cause.os_error.strerror or cause.os_error}"
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
