"""A vc-apiserver with the process runtime and its snapshot storage, for the backup and restore suites:
real etcd, real tenant control planes, real kubectl."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.storage.keys import KeyLayout
from apiserver.storage.secrets import generate_key_file
from hack.harness import BIN, ApiServer, Etcd, Pki, free_port
from tests.conftest import Kubectl, start_etcd, tenant_processes
from tests.support.etcdadmin import EtcdAdmin

GV = "/apis/kosmos.io/v1alpha1"


@dataclass
class Backups:
    api: ApiServer
    etcd: Etcd
    kubectl: Kubectl
    root: Path

    @classmethod
    def start(cls, root: Path, pki_files: Pki, identity: str) -> Backups:
        etcd = start_etcd(root, "etcd")
        key = generate_key_file(root / "encryption.key")
        api = ApiServer(pki_files, etcd.url, free_port(), root / "vc-apiserver.log", extra_args=[
            "--control-plane-runtime", "process", "--runtime-dir", str(root / "tenants"), "--runtime-bin-dir",
            str(BIN), "--encryption-key-file", str(key), "--leader-elect-lease-duration", "3",
            "--identity", identity]).start()
        return cls(api, etcd, Kubectl(api.kubeconfig(root / "admin.kubeconfig")), root)

    def stop(self) -> None:
        for tenant in (self.root / "tenants").glob("*/*"):
            for pid in tenant_processes(tenant):
                os.kill(pid, signal.SIGKILL)
        self.api.stop()
        self.etcd.stop()

    def snapshots(self, ns: str, name: str) -> Path:
        return self.root / "snapshots" / ns / name

    def tenant_dir(self, ns: str, name: str) -> Path:
        return self.root / "tenants" / ns / name

    def get(self, ns: str, name: str) -> dict[str, Any]:
        return self.kubectl.json("get", "vc", name, "-n", ns)

    def stored(self, ns: str, name: str) -> dict[str, Any]:
        """The VirtualCluster as stored in the dedicated etcd: readable while vc-apiserver is down."""
        key = KeyLayout(VIRTUALCLUSTERS.group, VIRTUALCLUSTERS.resource).key(ns, name)
        value = asyncio.run(EtcdAdmin(self.etcd.url).get(key))
        return json.loads(value) if value else {}

    def kubeconfig(self, ns: str, name: str) -> Path:
        path = self.root / f"{ns}-{name}-{time.monotonic_ns()}.kubeconfig"
        path.write_text(self.kubectl.run("get", "--raw", f"{GV}/namespaces/{ns}/virtualclusters/{name}/kubeconfig")
                        .stdout)
        return path

    def tenant(self, ns: str, name: str) -> Kubectl:
        return Kubectl(self.kubeconfig(ns, name))

    def wait_ready(self, ns: str, name: str) -> None:
        self.kubectl.run("wait", f"vc/{name}", "-n", ns, "--for=condition=Ready", "--timeout=120s", timeout=150)

    def wait_backups(self, ns: str, name: str, check: Any, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        backups: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            backups = (self.get(ns, name).get("status") or {}).get("backups") or []
            if check(backups):
                return backups
            time.sleep(0.5)
        raise AssertionError(f"status.backups never got there: {backups}")

    def request_snapshot(self, ns: str, name: str) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.kubectl.run("annotate", "vc", name, "-n", ns, f"kosmos.io/snapshot-requested={now}", "--overwrite")
