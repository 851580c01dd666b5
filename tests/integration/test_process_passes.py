"""The process runtime's passes over a tenant whose PKI and address did not change (real etcd and
kube-apiserver started by the pass)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from certs import tenant as tenantpki
from hack.harness import BIN
from reconciler.runtime.process import ProcessRuntime


async def new_pki() -> tenantpki.TenantPki:
    return await asyncio.to_thread(tenantpki.generate, tenantpki.apiserver_sans("127.0.0.1", [], "10.96.0.1"))


async def test_passes_of_an_unchanged_tenant_leave_its_files_alone_until_a_full_pass_undoes_drift(
        tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path / "tenants", BIN)
    vc = {"metadata": {"namespace": "ns", "name": "quiet", "uid": "uid-quiet"}, "spec": {}}
    pki = await new_pki()
    base = runtime.dir("ns", "quiet")
    admin, ca = base / "admin.kubeconfig", base / "pki" / "ca.crt"
    try:
        await runtime.ensure(vc, pki)
        written = admin.read_bytes()
        admin.unlink()

        await runtime.ensure(vc, pki)
        await runtime.ensure(vc, pki)
        assert not admin.exists(), "a pass within rewrite_after of the full one writes nothing"

        runtime.rewrite_after = 0.0
        await runtime.ensure(vc, pki)
        assert admin.read_bytes() == written, "a full pass writes back what was removed by hand"

        runtime.rewrite_after = 60.0
        renewed = await new_pki()
        await runtime.ensure(vc, renewed)
        assert ca.read_bytes() == renewed.files["ca.crt"] != pki.files["ca.crt"], "a new PKI is written at once"

        admin.unlink()
        await runtime.release()
        await runtime.ensure(vc, renewed)
        assert admin.exists(), "after release (leadership ended) the next pass is a full one"

        admin.unlink()
        await runtime.hibernate(vc)
        await runtime.ensure(vc, renewed)
        assert admin.exists(), "a woken tenant's first pass is a full one"
    finally:
        await runtime.teardown("ns", "quiet")
        await runtime.release()
