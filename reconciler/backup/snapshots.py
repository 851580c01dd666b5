"""Where a tenant's etcd snapshots are kept, and how one is told good from bad.

``<root>/<namespace>/<virtualcluster>/<name>.db`` holds etcd's snapshot stream as etcd sends it
(``etcdctl snapshot save`` writes the same file): the bbolt database, then the SHA-256 of it. Beside
it, ``<name>.json`` records when it was taken and at which revision. Both are written by the
reconciler only, mode 0600 in directories of mode 0700; they hold the tenant's data (its objects,
its Secrets) and none of this server's key material, which lives in the dedicated etcd.

A snapshot is verified as etcd's own tools check one before a restore: the trailing SHA-256 matches
the data (``etcdutl snapshot restore`` refuses a mismatch), and the data is a bbolt database with a
valid meta page (magic, version, FNV-1a checksum: what bbolt checks when it opens a file).
Snapshots outlive their VirtualCluster: they are backups.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apiserver.machinery.timefmt import rfc3339
from reconciler.fileio import remove, write_atomic

log = logging.getLogger(__name__)

HASH_SIZE = 32  # etcd appends the SHA-256 of the database to its snapshot stream
BOLT_MAGIC = 0xED0CDAED
BOLT_VERSION = 2
PAGE_HEADER = 16  # a bbolt page: id u64, flags u16, count u16, overflow u32
MAX_PAGE = 64 * 1024  # bbolt's page size is the OS page size
CHUNK = 1024 * 1024
META = struct.Struct("<IIII QQ QQQ Q")  # magic, version, pageSize, flags, root{pgid, seq}, freelist, pgid, txid, checksum


def _fnv64a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _meta_problem(db: bytes, offset: int) -> str:
    """'' when the bbolt meta page at ``offset`` is valid, else what is wrong with it."""
    start = offset + PAGE_HEADER
    if len(db) < start + META.size:
        return "too short for a meta page"
    magic, version, page_size, *_rest, checksum = META.unpack_from(db, start)
    if magic != BOLT_MAGIC:
        return "not a bbolt database (bad magic number)"
    if version != BOLT_VERSION:
        return f"unknown bbolt version {version}"
    if _fnv64a(db[start:start + META.size - 8]) != checksum:
        return "meta page checksum mismatch"
    return f"page size {page_size}" if page_size <= 0 else ""


def verify(path: Path) -> str:
    """'' when the snapshot stream in ``path`` is good, else why not (read in chunks: a tenant's etcd
    may hold gigabytes)."""
    size = path.stat().st_size
    if size % 512 != HASH_SIZE:
        return f"{size} bytes: not a database followed by its SHA-256"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        head = f.read(min(size - HASH_SIZE, 2 * MAX_PAGE))
        digest.update(head)
        left = size - HASH_SIZE - len(head)
        while left > 0:
            chunk = f.read(min(left, CHUNK))
            if not chunk:
                return "the file ended early"
            digest.update(chunk)
            left -= len(chunk)
        trailer = f.read(HASH_SIZE)
    if digest.digest() != trailer:
        return "the SHA-256 of the data does not match the one etcd appended"
    first = _meta_problem(head, 0)
    if not first:
        return ""
    # bbolt keeps two meta pages and opens a file whose second one is good
    page_size = struct.unpack_from("<I", head, PAGE_HEADER + 8)[0] if len(head) >= PAGE_HEADER + 12 else 0
    if 0 < page_size <= MAX_PAGE and not _meta_problem(head, page_size):
        return ""
    return first


@dataclass(frozen=True)
class Snapshot:
    name: str
    time: str  # RFC 3339
    revision: int
    size: int
    problem: str = ""  # why verification failed ('' when verified)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "time": self.time, "revision": self.revision, "sizeBytes": self.size,
                "verified": not self.problem,
                "reason": "PreUpgrade" if self.name.endswith(f"-{PRE_UPGRADE}") else "Scheduled"}


PRE_UPGRADE = "preupgrade"  # the suffix of a snapshot taken before an upgrade (its reason: PreUpgrade)


def retained(snapshots: list[Snapshot], keep: int) -> list[Snapshot]:
    """Of ``snapshots`` (oldest first), those :meth:`SnapshotStore.prune` keeps."""
    good = [s for s in snapshots if not s.problem][-keep:] if keep > 0 else []
    recent = snapshots[-keep:] if keep > 0 else []
    return [s for s in snapshots if s in good or (s.problem and s in recent)]


def snapshot_name(vc_name: str, moment: dt.datetime) -> str:
    return f"{vc_name}-{moment.astimezone(dt.UTC):%Y%m%d-%H%M%S}"


@dataclass(frozen=True)
class SnapshotStore:
    """Snapshot files under ``root`` (``--snapshot-dir``)."""

    root: Path

    def dir(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    def path(self, namespace: str, name: str, snapshot: str) -> Path:
        return self.dir(namespace, name) / f"{snapshot}.db"

    def prepare(self, namespace: str, name: str) -> Path:
        directory = self.dir(namespace, name)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return directory

    def sweep(self, namespace: str, name: str) -> list[str]:
        """Remove what a snapshot cut short left behind (the server killed while it streamed, verified or
        recorded one): temporary files, and a ``.db`` never recorded, so never verified. Run while no
        snapshot of this VirtualCluster is being taken (its passes run one at a time). Returns what went."""
        directory = self.dir(namespace, name)
        try:
            names = set(os.listdir(directory))
        except FileNotFoundError:
            return []
        stale = sorted(n for n in names if n.startswith(".")
                       or (n.endswith(".db") and f"{n.removesuffix('.db')}.json" not in names))
        for leftover in stale:
            remove(directory / leftover)
        if stale:
            log.warning("removed what an unfinished snapshot of %s/%s left: %s", namespace, name, ", ".join(stale))
        return stale

    def record(self, namespace: str, name: str, snapshot: str, moment: dt.datetime, revision: int) -> Snapshot:
        """Verify a snapshot just written at :meth:`path`; record it when good, remove it when not."""
        path = self.path(namespace, name, snapshot)
        size = path.stat().st_size
        problem = verify(path)
        taken = rfc3339(moment)
        if problem:
            path.unlink(missing_ok=True)
            return Snapshot(snapshot, taken, revision, size, problem)
        meta = {"time": taken, "revision": revision, "sizeBytes": size}
        write_atomic(path.with_suffix(".json"), json.dumps(meta).encode(), 0o600)
        return Snapshot(snapshot, taken, revision, size)

    def list(self, namespace: str, name: str, check: bool = False) -> list[Snapshot]:
        """The recorded snapshots, oldest first, as last verified; ``check``: verified again now (a
        file damaged at rest says so, and that is recorded)."""
        found = []
        for meta_path in sorted(self.dir(namespace, name).glob("*.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            db = meta_path.with_suffix(".db")
            problem = str(meta.get("problem") or "")
            if check and not problem:
                try:
                    problem = verify(db)
                except OSError as e:
                    problem = f"unreadable: {e.strerror}"
                if problem:
                    log.warning("snapshot %s of %s/%s is damaged: %s", meta_path.stem, namespace, name, problem)
                    write_atomic(meta_path, json.dumps({**meta, "problem": problem}).encode(), 0o600)
            found.append(Snapshot(meta_path.stem, str(meta.get("time", "")), int(meta.get("revision") or 0),
                                  int(meta.get("sizeBytes") or 0), problem))
        return sorted(found, key=lambda s: (s.time, s.name))

    def prune(self, namespace: str, name: str, keep: int) -> list[Snapshot]:
        """Keep the newest ``keep`` good snapshots, each verified again; one found damaged counts for
        nothing, but stays listed (verified false) while it is among the newest ``keep`` of all, so
        that the damage is seen before it ages out. Returns what is kept, oldest first."""
        snapshots = self.list(namespace, name, check=True)
        kept = retained(snapshots, keep)
        for snapshot in snapshots:
            if snapshot not in kept:
                for suffix in (".json", ".db"):  # the record first: cut short, what is left is swept
                    self.path(namespace, name, snapshot.name).with_suffix(suffix).unlink(missing_ok=True)
                log.info("removed snapshot %s of %s/%s%s", snapshot.name, namespace, name,
                         f" ({snapshot.problem})" if snapshot.problem else "")
        return kept
