"""Metering on the playground: what each VirtualCluster costs, in vc-apiserver's /metrics, from a real
reconciler building real control planes (the ``process_host`` fixture, as ``make up`` starts it)."""

from __future__ import annotations

import json
import re
import ssl
import time
import urllib.request

import pytest

from hack.stack import Stack
from tests.conftest import Kubectl, vc

pytestmark = pytest.mark.e2e

NS = "metering"
SERIES = re.compile(r'^(virtualcluster_\w+)\{([^}]*)\} (\S+)$')


def scrape(stack: Stack) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """vc-apiserver's /metrics as the host's admin reads it (authorized by the host), virtualcluster_* only."""
    ctx = ssl.create_default_context(cafile=str(stack.root / "serving" / "ca.crt"))
    ctx.load_cert_chain(str(stack.host.pki.path("admin.crt")), str(stack.host.pki.path("admin.key")))
    with urllib.request.urlopen(f"https://127.0.0.1:{stack.ports.vc_apiserver}/metrics", context=ctx,
                                timeout=30) as resp:
        text = resp.read().decode()
    found = {}
    for line in text.splitlines():
        m = SERIES.match(line)
        if m:
            labels = frozenset(tuple(kv.split("=", 1)) for kv in re.findall(r'\w+="[^"]*"', m.group(2)))
            found[(m.group(1), frozenset((k, v.strip('"')) for k, v in labels))] = float(m.group(3))
    return found


def of(series: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, name: str,
       **labels: str) -> float | None:
    want = frozenset({("namespace", NS), ("name", name), *labels.items()})
    return series.get((metric, want))


def test_each_virtualcluster_is_metered_while_it_exists_and_its_series_go_with_it(process_host: Stack) -> None:
    k = Kubectl(process_host.kubeconfig, host_namespaces=True)
    k.ensure_namespace(NS)
    sliced = vc("sliced", NS, {"promoteResources": {"resources": {"cpu": "1500m", "memory": "2Gi"}}})
    k.run("create", "-f", "-", input=json.dumps(vc("metered", NS)))
    k.run("create", "-f", "-", input=json.dumps(sliced))
    k.run("wait", "vc/metered", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=150)
    for _ in range(2):
        k.run("get", "--raw", f"/apis/kosmos.io/v1alpha1/namespaces/{NS}/virtualclusters/metered/kubeconfig")
    first = scrape(process_host)
    time.sleep(1.0)
    series = scrape(process_host)
    assert of(series, "virtualcluster_phase", "metered", phase="Completed") == 1.0
    assert of(series, "virtualcluster_phase", "metered", phase="Pending") == 0.0
    assert of(series, "virtualcluster_credentials_issued_total", "metered") == 2.0
    assert of(series, "virtualcluster_credentials_issued_total", "sliced") == 0.0
    awake_before = of(first, "virtualcluster_awake_seconds_total", "metered") or 0.0
    assert (of(series, "virtualcluster_awake_seconds_total", "metered") or 0.0) >= awake_before + 0.9
    assert of(series, "virtualcluster_hibernated_seconds_total", "metered") == 0.0
    assert of(series, "virtualcluster_promoted_nodes", "metered") == 0.0
    memory = of(series, "virtualcluster_control_plane_memory_bytes", "metered") or 0.0
    assert memory > 50 * 2**20, "etcd, kube-apiserver, the controller-manager and the scheduler are measured"
    assert (of(series, "virtualcluster_control_plane_cpu_seconds_total", "metered") or 0.0) > 0.5
    assert of(series, "virtualcluster_slice_cpu_allocated_cores", "sliced") == 1.5
    assert of(series, "virtualcluster_slice_memory_allocated_bytes", "sliced") == 2 * 2**30
    assert of(series, "virtualcluster_slice_cpu_allocated_cores", "metered") is None
    k.run("delete", "vc", "metered", "sliced", "-n", NS, "--wait", timeout=120)
    gone = scrape(process_host)
    assert not [key for key in gone if ("namespace", NS) in key[1]], "a deleted VirtualCluster's series go"
