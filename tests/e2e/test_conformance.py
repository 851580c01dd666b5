"""Kubernetes' own conformance tests on tenants: a short subset of ``[Conformance]``, one or two per
area (hack/conformance.py's SMOKE), run by the upstream suite (``e2e.test``) against a dedicated
tenant and a tenant on a shared slice of the real-node lab. ``make conformance`` runs the whole
suite against both and the host (docs/conformance.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.conformance import SMOKE, Run, create_tenant, delete_tenant, focus_of, import_suite_images
from hack.realnodes import RealNodeLab
from hack.stack import Stack

# The first test of the run to use the real-node lab pays for starting it, and on a machine with nothing cached
# for building its images and the suite's: 250 s of setup in a cold CI run, before the suite's own minute.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SPECS = {"dedicated": {"promoteResources": {"nodes": ["real-worker-1"]}},
         "slice": {"promoteResources": {"resources": {"cpu": "2", "memory": "4Gi"}}}}


@pytest.fixture(scope="module")
def suite_images(real_stack: Stack, real_lab: RealNodeLab) -> None:
    import_suite_images(real_stack, say=lambda _: None)


@pytest.fixture(params=sorted(SPECS))
def tenant_kubeconfig(request: pytest.FixtureRequest, real_stack: Stack, suite_images: None,
                      tmp_path: Path) -> Iterator[tuple[str, Path]]:
    target = request.param
    name = f"conformance-{target}"
    try:
        yield target, create_tenant(real_stack.host, name, SPECS[target], tmp_path, say=lambda _: None)
    finally:
        delete_tenant(real_stack.host, name)


def test_the_conformance_smoke_subset_passes_on_dedicated_and_slice_tenants(
        tenant_kubeconfig: tuple[str, Path], tmp_path: Path) -> None:
    target, kubeconfig = tenant_kubeconfig

    results = Run(target, kubeconfig, tmp_path / "suite", focus_of(SMOKE), procs=3, timeout="20m").execute(
        say=lambda _: None)

    failures = "\n".join(f"{c.name}: {c.cause}" for c in results.failed())
    ran = sorted(c.name for c in results.cases if c.status != "skipped")
    assert ran == sorted(SMOKE), f"the suite ran {ran}"
    assert not failures, f"on the {target} tenant:\n{failures}"
