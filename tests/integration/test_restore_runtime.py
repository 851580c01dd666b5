"""The process runtime's restore with the real etcdutl: what etcd's own restore refuses leaves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.harness import binary
from reconciler.backup.snapshots import verify
from reconciler.runtime.base import RuntimeFailure
from reconciler.runtime.process import ProcessRuntime
from tests.unit.test_backup_rules import bolt, restoring_vc, stream


async def test_a_snapshot_etcdutl_refuses_leaves_no_data_directory_and_says_what_etcdutl_said(
        tmp_path: Path) -> None:
    """A well-formed bbolt file followed by etcd's hash of it, but no etcd database, passes verification;
    etcd's own restore is what refuses it, and what it wrote on the way is removed."""
    runtime = ProcessRuntime(tmp_path / "tenants", Path(binary("etcdutl")).parent)
    empty = runtime.backups.store.prepare("ns", "prod") / "empty.db"
    empty.write_bytes(stream(bolt()))
    assert verify(empty) == ""
    with pytest.raises(RuntimeFailure) as refused:
        await runtime.restore(restoring_vc(), "prod", "empty", 'snapshot "empty"')
    assert refused.value.reason == "RestoreFailed"
    assert refused.value.message.startswith('etcdutl snapshot restore refused snapshot "empty": panic: ')
    tenant = tmp_path / "tenants" / "ns" / "copy"
    assert sorted(p.name for p in tenant.iterdir()) == ["state.json"], "no etcd, no half-restored directory"
