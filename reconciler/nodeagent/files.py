"""The kubelet's files on a host node: which ones the agent replaces, how it saves them and puts them back.

Three paths: the kubelet's kubeconfig, the CA file it trusts, and its client credential (kubeadm's
``kubelet-client-current.pem``: with certificate rotation on, the kubelet prefers that file to the
kubeconfig's own certificate, so it has to change with the kubeconfig). Each is saved with its mode, or
as the symlink it is, or as absent, and restored exactly so. Every write is a temporary file renamed
into place: the kubelet never reads half a file, and a crash leaves either the old or the new one.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reconciler.fileio import remove, symlink_atomic, write_atomic

PRIVATE = 0o600
PUBLIC = 0o644


@dataclass(frozen=True)
class KubeletPaths:
    kubeconfig: Path
    ca: Path
    credential: Path  # client certificate and key in one PEM file, as kubeadm lays it out

    def all(self) -> tuple[Path, ...]:
        return self.kubeconfig, self.ca, self.credential

    def under(self, root: Path) -> KubeletPaths:
        """The same layout below ``root``: one node's directory on a machine that holds several."""
        return KubeletPaths(*(root / path.relative_to("/") for path in self.all()))


KUBEADM = KubeletPaths(Path("/etc/kubernetes/kubelet.conf"), Path("/etc/kubernetes/pki/ca.crt"),
                       Path("/var/lib/kubelet/pki/kubelet-client-current.pem"))


class Backup:
    """The kubelet's own files, saved under ``directory``; ``manifest.json`` is written last, so a
    backup either exists completely or not at all."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.manifest = directory / "manifest.json"

    def exists(self) -> bool:
        return self.manifest.exists()

    def save(self, paths: Iterable[Path]) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, mode=0o700)
        entries: list[dict[str, Any]] = []
        for index, path in enumerate(paths):
            entry: dict[str, Any] = {"path": str(path)}
            if path.is_symlink():
                entry.update(kind="symlink", target=os.readlink(path))
            elif path.exists():
                blob = f"{index}.data"
                write_atomic(self.directory / blob, path.read_bytes(), PRIVATE)  # may hold a private key
                entry.update(kind="file", mode=stat.S_IMODE(path.stat().st_mode), blob=blob)
            else:
                entry.update(kind="absent")
            entries.append(entry)
        write_atomic(self.manifest, json.dumps(entries, indent=1).encode(), PRIVATE)

    def saved(self) -> dict[str, Any]:
        """What was saved, by path, without any content (for logs)."""
        return {e["path"]: e["kind"] for e in json.loads(self.manifest.read_bytes())}

    def restore(self) -> None:
        for entry in json.loads(self.manifest.read_bytes()):
            path = Path(entry["path"])
            if entry["kind"] == "file":
                write_atomic(path, (self.directory / entry["blob"]).read_bytes(), entry["mode"])
            elif entry["kind"] == "symlink":
                symlink_atomic(path, entry["target"])
            else:
                remove(path)

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def tenant_kubeconfig(paths: KubeletPaths, server: str, node_user: str, cluster: str) -> bytes:
    """A kubeconfig that, like kubeadm's kubelet.conf, names the CA and credential files: the kubelet
    reloads a rotated credential from the file, which inline data would hide."""
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(paths.ca)}}],
        "users": [{"name": node_user, "user": {"client-certificate": str(paths.credential),
                                                "client-key": str(paths.credential)}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": node_user}}],
        "current-context": cluster,
    }
    return yaml.safe_dump(config, sort_keys=False).encode()


def stale(contents: dict[Path, tuple[bytes, int]]) -> list[Path]:
    """The paths whose content or mode differ from what is wanted."""
    return [path for path, (data, mode) in contents.items()
            if path.is_symlink() or not path.exists() or path.read_bytes() != data
            or stat.S_IMODE(path.stat().st_mode) != mode]
