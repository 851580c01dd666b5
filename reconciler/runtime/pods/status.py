"""What a tenant's host pods say about its control plane: the reason and message a VirtualCluster's
status carries while its apiserver does not answer (readiness itself is the apiserver's ``/readyz``)."""

from __future__ import annotations

from apiserver.apis.conditions import find_condition
from apiserver.machinery.timefmt import seconds_since
from reconciler.runtime.base import Obj
from reconciler.runtime.pods.hostobjects import COMPONENT, COMPONENTS

__all__ = ["UNSCHEDULABLE_GRACE", "all_running", "pod_problem", "pods_summary"]

STARTUP_GRACE = 300.0  # seconds pods may take to start before "Starting" becomes a complaint
# seconds a pod may stay unschedulable before that is a failure: the scheduler also says so of a claim made
# a moment before the pod that its cache has not seen yet, or that its provisioner has not bound yet
UNSCHEDULABLE_GRACE = 20.0
FAILING = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
           "CreateContainerError", "RunContainerError"}


def since(stamp: str | None) -> float:
    """Seconds since a timestamp of the host's (0 when there is none)."""
    return seconds_since(stamp) if stamp else 0.0


def age(obj: Obj) -> float:
    return since(obj.get("metadata", {}).get("creationTimestamp"))


def pod_problem(pod: Obj, unschedulable_grace: float = UNSCHEDULABLE_GRACE) -> tuple[str, bool]:
    """Why a pod is not running (and whether that is a failure rather than a start). An unschedulable
    pod counts as failing once it has been so for ``unschedulable_grace`` seconds (by the condition's
    ``lastTransitionTime``, or the pod's age if the condition has none)."""
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return waiting["reason"], waiting["reason"] in FAILING
    scheduled = find_condition(status.get("conditions"), "PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        stamp = scheduled.get("lastTransitionTime") or (pod.get("metadata") or {}).get("creationTimestamp")
        failing = scheduled.get("reason") == "Unschedulable" and since(stamp) >= unschedulable_grace
        return f"unschedulable: {scheduled.get('message', '')[:120]}", failing
    if not (pod.get("spec") or {}).get("nodeName"):
        return "not scheduled to a node", False
    return status.get("phase", "Pending"), False


def all_running(pods: list[Obj]) -> bool:
    return bool(pods) and all((p.get("status") or {}).get("phase") == "Running" for p in pods)


def pods_summary(pods: list[Obj]) -> tuple[str, str]:
    """(reason, message) from the host pods' state: what is running, and what is wrong with the rest."""
    if not pods:
        return "Starting", "no pods of this control plane exist on the host yet"
    parts, failing, waiting_since = [], False, 0.0
    for component in COMPONENTS:
        mine = [p for p in pods if p["metadata"].get("labels", {}).get(COMPONENT) == component]
        running = [p for p in mine if (p.get("status") or {}).get("phase") == "Running"]
        part = f"{component} {len(running)}/{len(mine)} pods running"
        problems = []
        for pod in mine:
            if pod in running:
                continue
            problem, bad = pod_problem(pod)
            failing |= bad
            waiting_since = max(waiting_since, age(pod))
            problems.append(f"{pod['metadata']['name']}: {problem}")
        parts.append(part + (f" ({'; '.join(problems[:2])})" if problems else ""))
    summary = "host pods: " + ", ".join(parts)
    if failing:
        return "ComponentFailing", summary
    if waiting_since > STARTUP_GRACE:
        return "PodsNotRunning", summary
    if all_running(pods) and max(age(p) for p in pods) > STARTUP_GRACE:
        return "ApiserverUnreachable", summary
    return "Starting", summary
