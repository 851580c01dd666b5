"""Where a ``process`` runtime tenant lives on this machine: its directory, its ports and its address.

Each tenant gets ``<root>/<namespace>/<name>``: PKI files, etcd data, logs, and ``state.json``, which
records the uid of the VirtualCluster it belongs to and the ports its components listen on, allocated
once and kept through restarts and hibernation.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.runtime.base import Obj, RuntimeFailure

__all__ = ["PORT_NAMES", "Layout", "can_bind", "listen_address"]

PORT_NAMES = ("apiserver", "etcd-client", "etcd-peer", "controller-manager", "scheduler")


@dataclass(frozen=True)
class Layout:
    """Tenant directories under ``root``, with ports from ``port_range``."""

    root: Path
    port_range: tuple[int, int]

    def dir(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    def state_path(self, namespace: str, name: str) -> Path:
        return self.dir(namespace, name) / "state.json"

    def read_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_path(namespace, name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def owned(self) -> list[tuple[str, str]]:
        """(namespace, name) of every tenant with a directory here."""
        if not self.root.exists():
            return []
        return [(ns.name, d.name) for ns in self.root.iterdir() if ns.is_dir()
                for d in ns.iterdir() if (d / "state.json").exists()]

    def allocate_ports(self, host: str) -> dict[str, int]:
        """Free ports, skipping every port another tenant here has recorded."""
        taken: set[int] = set()
        if self.root.exists():
            for state in self.root.glob("*/*/state.json"):
                with contextlib.suppress(ValueError, OSError):
                    taken |= set(json.loads(state.read_text())["ports"].values())
        ports: dict[str, int] = {}
        start, end = self.port_range
        candidate = start + (os.getpid() * 7) % max(end - start, 1)
        for _ in range(end - start):
            candidate = start + (candidate - start + 1) % (end - start)
            if candidate in taken or candidate in ports.values():
                continue
            bind_host = host if PORT_NAMES[len(ports)] == "apiserver" else "127.0.0.1"
            if _port_free(bind_host, candidate):
                ports[PORT_NAMES[len(ports)]] = candidate
                if len(ports) == len(PORT_NAMES):
                    return ports
        raise RuntimeFailure("NoFreePorts", f"no free ports in {start}-{end} for a control plane")


def listen_address(vc: Obj) -> str:
    """The address the tenant apiserver listens on: externalIP when this machine owns it, else
    loopback. An externalIP it does not own (a VIP, a NAT address, the examples' dummy IP) is
    how clients elsewhere reach the apiserver: it goes in the certificate, not in a bind."""
    external = (vc.get("spec") or {}).get("externalIP") or ""
    return external if _is_local_ip(external) else "127.0.0.1"


def can_bind(host: str) -> bool:
    """Whether this machine owns ``host`` (an address the apiserver could listen on)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, 0))
        except OSError:
            return False
    return True


def _is_local_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return can_bind(value)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
