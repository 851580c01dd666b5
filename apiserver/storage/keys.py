"""Key layout in the dedicated etcd: the one place that knows how keys are spelled.

Everything this server writes lives under ``/registry/`` so that one etcd watch on
that prefix sees every revision (the watch cache relies on it to know how current
it is).
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "/registry/"
COMPACT_KEY = "/registry/compact_rev_key"
LEADER_KEY_PREFIX = "/registry/kosmos.io/leases/"


@dataclass(frozen=True)
class KeyLayout:
    """Keys of one namespaced resource: ``/registry/<group>/<resource>/<namespace>/<name>``."""

    group: str
    resource: str

    @property
    def prefix(self) -> str:
        return f"{ROOT}{self.group}/{self.resource}/"

    def namespace_prefix(self, namespace: str | None) -> str:
        return self.prefix + (f"{namespace}/" if namespace else "")

    def key(self, namespace: str, name: str) -> str:
        return f"{self.prefix}{namespace}/{name}"

    def split(self, key: str | bytes) -> tuple[str, str] | None:
        """(namespace, name) of a key of this resource, or None for any other key."""
        text = key.decode() if isinstance(key, bytes) else key
        if not text.startswith(self.prefix):
            return None
        rest = text[len(self.prefix):]
        namespace, sep, name = rest.partition("/")
        if not sep or not name or "/" in name:
            return None
        return namespace, name

    def owns(self, key: bytes) -> bool:
        return key.startswith(self.prefix.encode())


def secret_key(kind: str, namespace: str, name: str) -> str:
    """Where encrypted secret material of an object lives (never served by the API)."""
    return f"{ROOT}kosmos.io/secrets/{kind}/{namespace}/{name}"
