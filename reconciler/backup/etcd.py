"""Taking a tenant etcd's snapshot and restoring one: the one way of each, for both runtimes.

The ``process`` runtime calls these in vc-apiserver; the ``pods`` runtime runs them in a pod of
vc-apiserver's own image beside the tenant's etcd (``python -m reconciler.backup``), where the
snapshot volume is mounted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from apiserver.etcd.client import EtcdClient, EtcdConfig, EtcdError
from reconciler.backup.snapshots import Snapshot, SnapshotStore, verify

RESTORE_FAILED = "RestoreFailed"  # the reason of a VirtualCluster whose spec.restoreFrom cannot be restored
SNAPSHOT_FAILED = "SnapshotFailed"
SNAPSHOT_TIMEOUT = 600.0  # seconds a snapshot may take (the stream's keepalive finds a dead member sooner)
RESTORE_TIMEOUT = 600.0  # seconds etcdutl may take to restore a snapshot


class BackupFailure(Exception):
    """A snapshot or restore that did not happen, with a reason for the VirtualCluster's condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Member:
    """The etcd member a restored data directory belongs to (etcdutl writes it into the data)."""

    name: str
    peer_url: str
    initial_cluster: str
    token: str = "etcd-cluster"  # etcd's default --initial-cluster-token


async def save(config: EtcdConfig, into: Path) -> int:
    """etcd's snapshot stream written to ``into`` as it arrives, through a temporary file beside it, so
    a broken stream leaves nothing; the revision as the snapshot starts (it holds every write up to
    it). Raises BackupFailure."""
    client = EtcdClient(config)
    partial = into.with_name(f".{into.name}.part")
    try:
        async with asyncio.timeout(SNAPSHOT_TIMEOUT):
            await client.start()
            revision = await client.current_revision(b"\0")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                async for part in client.snapshot():
                    out.write(part.blob)
                out.flush()
                os.fsync(out.fileno())
        os.replace(partial, into)
    except EtcdError as e:
        raise BackupFailure(SNAPSHOT_FAILED, f"taking a snapshot of the tenant's etcd: {e.message}") from None
    except TimeoutError:
        raise BackupFailure(SNAPSHOT_FAILED, f"the tenant's etcd did not finish its snapshot within "
                                             f"{SNAPSHOT_TIMEOUT:.0f}s") from None
    finally:
        partial.unlink(missing_ok=True)
        await client.close()
    return revision


def check(etcdutl: Path, snapshot: Path, label: str) -> None:
    """Refuse, before anything is made, a restore that cannot succeed: no etcdutl, or a snapshot that is
    missing or damaged (etcd's SHA-256, a bbolt meta page: what etcdutl checks too, said here in words).
    Blocking. Raises BackupFailure (:data:`RESTORE_FAILED`)."""
    if not etcdutl.exists():
        raise BackupFailure(RESTORE_FAILED, f"cannot restore {label}: {etcdutl} is missing")
    try:
        problem = verify(snapshot)
    except FileNotFoundError:
        raise BackupFailure(RESTORE_FAILED, f"{label} does not exist") from None
    except OSError as e:
        problem = f"unreadable: {e.strerror}"
    if problem:
        raise BackupFailure(RESTORE_FAILED, f"{label} failed verification and was not restored: {problem}")


def restore(etcdutl: Path, snapshot: Path, target: Path, member: Member, label: str) -> bool:
    """``etcdutl snapshot restore`` of a :func:`check`-ed snapshot into a temporary directory beside
    ``target``, renamed to it once whole: etcd never starts on half a restore, and a restore cut short
    is started over. False when ``target`` exists (restored before, or started). Blocking. Raises
    BackupFailure (:data:`RESTORE_FAILED`)."""
    if target.exists():
        return False
    partial = target.with_name(f".{target.name}.restoring")
    shutil.rmtree(partial, ignore_errors=True)
    command = [str(etcdutl), "snapshot", "restore", str(snapshot), "--data-dir", str(partial),
               "--name", member.name, "--initial-cluster", member.initial_cluster,
               "--initial-advertise-peer-urls", member.peer_url, "--initial-cluster-token", member.token]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RESTORE_TIMEOUT)
    except subprocess.TimeoutExpired:
        shutil.rmtree(partial, ignore_errors=True)
        raise BackupFailure(RESTORE_FAILED, f"etcdutl did not restore {label} within {RESTORE_TIMEOUT:.0f}s") \
            from None
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise BackupFailure(RESTORE_FAILED, f"etcdutl snapshot restore refused {label}: "
                                            f"{etcdutl_said(done.stderr + done.stdout)[-300:]}")
    os.chmod(partial, 0o700)
    os.replace(partial, target)
    return True


def etcdutl_said(output: str) -> str:
    """What etcdutl's output says went wrong: its error or panic line, else its last log line of an error,
    else its last line (not a goroutine's stack)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("Error:", "panic:")):
            return line
    for line in reversed(lines):
        if "\terror\t" in line or "\tfatal\t" in line:
            return line
    return lines[-1] if lines else "no output"


async def take(store: SnapshotStore, namespace: str, name: str, snapshot: str, moment: dt.datetime, keep: int,
               config: EtcdConfig) -> tuple[Snapshot, list[Snapshot]]:
    """One snapshot pass into ``store``: sweep what one cut short left, save, verify and record the new
    one, then keep the newest ``keep`` (a snapshot that failed verification is removed and prunes
    nothing). Returns it and the snapshots kept. Raises BackupFailure."""
    await asyncio.to_thread(store.sweep, namespace, name)
    await asyncio.to_thread(store.prepare, namespace, name)
    revision = await save(config, store.path(namespace, name, snapshot))
    taken = await asyncio.to_thread(store.record, namespace, name, snapshot, moment, revision)
    if taken.problem:
        return taken, await asyncio.to_thread(store.list, namespace, name)
    return taken, await asyncio.to_thread(store.prune, namespace, name, keep)
