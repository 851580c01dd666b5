"""Hypothesis strategies for hostile input: JSON of any shape, VirtualCluster objects each of whose
fields is plausible or anything at all (the fields only the server writes included), JSON merge
patches and JSON patches; and the example budget of a fuzzer."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from apiserver.apis.resource import FINALIZER
from tests.support import SOAK

__all__ = ["FUZZ_NS", "JSON", "JSON_PATCHES", "JSON_SCALARS", "OBJECTS", "WRITE_QUERIES", "examples", "merge_patches"]


FUZZ = settings(deadline=None, database=None, derandomize=not SOAK, print_blob=True,
                suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


def examples(n: int) -> settings:
    """The example budget of one fuzzer: small in `make test`, 25 times more under VC_SOAK=1."""
    return settings(FUZZ, max_examples=n * 25 if SOAK else n)


# -- JSON, objects and their fields ---------------------------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def either(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A plausible value for a field, or any JSON at all."""
    return st.one_of(plausible, JSON)


def mostly(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The plausible value nine times in ten, any JSON at all otherwise (so most inputs get past the
    type check and into validation, admission and storage)."""
    return st.integers(0, 9).flatmap(lambda i: JSON if i == 0 else plausible)


DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
NAMES = st.one_of(DNS_LABEL, st.text(max_size=70))
LABEL_KEYS = st.one_of(st.from_regex(r"([a-z0-9.]{1,10}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?",
                                     fullmatch=True), st.text(max_size=70))
LABELS = st.dictionaries(LABEL_KEYS, st.one_of(DNS_LABEL, st.text(max_size=70), JSON), max_size=3)
INTS = st.one_of(st.integers(-3, 10), st.integers(min_value=-(2**70), max_value=2**70),
                 st.sampled_from([2**31, 2**63, 2**64, -(2**63) - 1]))
QUANTITIES = st.one_of(st.sampled_from(["1", "500m", "2Gi", "1e3", "0.5", "-1", "1E", "1Ei", "99999999999999999999Ei",
                                        "", "m", "1.5.5", "1e400", "0x10"]), INTS, st.floats(allow_nan=False,
                                                                                             allow_infinity=False),
                       st.text(max_size=8))
TIMES = st.one_of(st.just("2024-01-02T03:04:05Z"), st.text(max_size=25))
SELECTOR = st.fixed_dictionaries({}, optional={
    "matchLabels": either(LABELS),
    "matchExpressions": either(st.lists(st.fixed_dictionaries({
        "key": either(LABEL_KEYS),
        "operator": either(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt"])),
        "values": either(st.lists(st.text(max_size=10), max_size=3))}), max_size=2))})
SPEC = st.fixed_dictionaries({}, optional={
    "externalIP": either(st.ip_addresses().map(str) | DNS_LABEL),
    "externalIps": either(st.lists(st.ip_addresses().map(str), max_size=3)),
    "promotePolicies": either(st.lists(st.fixed_dictionaries(
        {"nodeCount": either(INTS)}, optional={"labelSelector": either(SELECTOR)}), max_size=2)),
    "promoteResources": either(st.fixed_dictionaries({}, optional={
        "nodes": either(st.lists(NAMES, max_size=3)),
        "nodeInfos": either(st.lists(st.fixed_dictionaries({"nodeName": either(NAMES)}), max_size=2)),
        "resources": either(st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]) | st.text(max_size=10),
                                            QUANTITIES, max_size=3)),
        "resourcesMode": either(st.sampled_from(["Shared", "Dedicated", "shared", ""]))})),
    "kubeInKubeConfig": either(st.fixed_dictionaries({}, optional={
        "apiServerReplicas": either(INTS),
        "apiServerServiceType": either(st.sampled_from(["nodePort", "hostNetwork", "LoadBalancer"])),
        "externalPort": either(INTS), "forceDestroy": either(st.booleans()),
        "etcdStorageClass": either(st.text(max_size=10)), "etcdUnitSize": either(QUANTITIES),
        "clusterCIDR": either(st.text(max_size=20))})),
    "kubeconfig": either(st.text(max_size=50)),
    "notInTheSchema": JSON,
})
CONDITION = st.fixed_dictionaries({
    "type": either(st.sampled_from(["Ready", "ControlPlaneReady", "NodesReady"])),
    "status": either(st.sampled_from(["True", "False", "Unknown", "Maybe"]))},
    optional={"reason": either(st.text(max_size=10)), "message": either(st.text(max_size=10)),
              "lastTransitionTime": either(TIMES), "observedGeneration": either(INTS)})
STATUS = st.fixed_dictionaries({}, optional={
    "phase": either(st.sampled_from(["Pending", "Preparing", "Initialized", "Completed", "Updating", "Deleting",
                                     "Bogus"])),
    "reason": either(st.text(max_size=20)), "message": either(st.text(max_size=20)),
    "updateTime": either(TIMES), "observedGeneration": either(INTS), "port": either(INTS),
    "controlPlaneEndpoint": either(st.text(max_size=30)),
    "conditions": either(st.lists(CONDITION, max_size=2)),
    "nodes": either(st.lists(st.fixed_dictionaries({
        "name": either(NAMES), "phase": either(st.sampled_from(["Claimed", "Joining", "Ready", "Releasing", "?"]))},
        optional={"shared": either(st.booleans())}), max_size=2)),
    "sharedResources": either(st.fixed_dictionaries({}, optional={
        "namespace": either(NAMES),
        "capacity": either(st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]) | st.text(max_size=10),
                                           QUANTITIES, max_size=3)),
        "used": either(st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITIES, max_size=2))})),
})
FINALIZERS = st.lists(st.one_of(st.just(FINALIZER), st.from_regex(r"[a-z]{1,8}\.io/[a-z]{1,8}", fullmatch=True),
                                st.text(max_size=20)), max_size=3)
SYSTEM_FIELDS = {
    "uid": either(st.uuids().map(str)),
    "resourceVersion": either(st.integers(0, 2**64).map(str)),
    "generation": either(INTS),
    "creationTimestamp": either(TIMES),
    "deletionTimestamp": either(TIMES),
    "deletionGracePeriodSeconds": either(INTS),
    "finalizers": either(FINALIZERS),
    "selfLink": JSON,
    "managedFields": JSON,
    "ownerReferences": JSON,
}
FUZZ_NS = "fuzz-objects"
METADATA = st.fixed_dictionaries({"name": either(NAMES)}, optional={
    "namespace": mostly(st.just(FUZZ_NS)),
    "generateName": either(NAMES),
    "labels": either(LABELS),
    "annotations": either(st.dictionaries(LABEL_KEYS, st.text(max_size=30), max_size=3)),
    **SYSTEM_FIELDS,
})
OBJECTS = st.fixed_dictionaries({
    "apiVersion": mostly(st.just("kosmos.io/v1alpha1")),
    "kind": mostly(st.just("VirtualCluster")),
    "metadata": mostly(METADATA),
}, optional={"spec": mostly(SPEC), "status": either(STATUS)})
WRITE_QUERIES = st.fixed_dictionaries({}, optional={
    "fieldValidation": st.sampled_from(["Strict", "Warn", "Ignore", "strict", "Warn", "Ignore", "bogus", ""]),
    "dryRun": st.sampled_from(["All", "All", "All", "all"]),
})


# -- patches --------------------------------------------------------------------------------------

def merge_patches() -> st.SearchStrategy[Any]:
    meta = st.fixed_dictionaries({}, optional={  # name and namespace: see the system-field test
        "labels": either(LABELS | st.none()), "annotations": JSON, **SYSTEM_FIELDS})
    return st.fixed_dictionaries({}, optional={
        "apiVersion": mostly(st.just("kosmos.io/v1alpha1")), "kind": mostly(st.just("VirtualCluster")),
        "metadata": mostly(meta), "spec": either(SPEC), "status": either(STATUS)})


POINTERS = mostly(st.sampled_from([
    "", "/", "/metadata", "/metadata/uid", "/metadata/resourceVersion", "/metadata/generation",
    "/metadata/creationTimestamp", "/metadata/deletionTimestamp", "/metadata/deletionGracePeriodSeconds",
    "/metadata/finalizers", "/metadata/finalizers/0", "/metadata/finalizers/-", "/metadata/finalizers/99999999999999999999",
    "/metadata/labels", "/metadata/labels/a~1b", "/metadata/name", "/metadata/namespace", "/metadata/~2",
    "/spec", "/spec/externalIP", "/spec/promotePolicies", "/spec/promotePolicies/0/nodeCount", "/spec/kubeconfig",
    "/status", "/status/phase", "/status/observedGeneration", "/status/conditions/-", "/apiVersion", "/kind",
]) | st.text(max_size=20))
JSON_PATCH_OPS = st.fixed_dictionaries(
    {"op": mostly(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"])),
     "path": POINTERS, "value": either(st.sampled_from([FINALIZER, "2024-01-02T03:04:05Z", "0", 7])),
     "from": POINTERS})
JSON_PATCHES = mostly(st.lists(JSON_PATCH_OPS, max_size=4))
