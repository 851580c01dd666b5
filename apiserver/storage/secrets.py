"""Secret material (tenant private keys) in the dedicated etcd, encrypted with AES-GCM.

Values are ``vcenc:aesgcm:v1:`` + 12-byte nonce + ciphertext; the etcd key is the
associated data, so a value copied under another key does not decrypt. Nothing here
is reachable through the REST API.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiserver.etcd.client import EtcdClient
from apiserver.storage.keys import secret_key
from certs.tenant import TenantPki

PREFIX = b"vcenc:aesgcm:v1:"
PKI_KIND = "pki"  # a tenant's PKI files, plus "uid" of the VirtualCluster they belong to


def generate_key_file(path: Path) -> Path:
    """A new random 256-bit key, base64 in a 0600 file (done once by ``make up`` or an installer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(base64.b64encode(AESGCM.generate_key(bit_length=256)).decode() + "\n")
    return path


def load_key_file(path: str | Path) -> bytes:
    key = base64.b64decode(Path(path).read_text().strip())
    if len(key) not in (16, 24, 32):
        raise ValueError(f"{path}: an AES key must be 16, 24 or 32 bytes, got {len(key)}")
    return key


class SecretStore:
    def __init__(self, etcd: EtcdClient, key: bytes) -> None:
        self.etcd = etcd
        self._aead = AESGCM(key)

    def _seal(self, key: str, data: dict[str, bytes]) -> bytes:
        plain = orjson.dumps({k: base64.b64encode(v).decode() for k, v in data.items()})
        nonce = os.urandom(12)
        return PREFIX + nonce + self._aead.encrypt(nonce, plain, key.encode())

    def _open(self, key: str, value: bytes) -> dict[str, bytes]:
        if not value.startswith(PREFIX):
            raise ValueError(f"{key}: not an encrypted value")
        body = value[len(PREFIX):]
        plain = self._aead.decrypt(body[:12], body[12:], key.encode())
        return {k: base64.b64decode(v) for k, v in orjson.loads(plain).items()}

    async def put(self, kind: str, namespace: str, name: str, data: dict[str, bytes]) -> None:
        key = secret_key(kind, namespace, name)
        await self.etcd.put(key, self._seal(key, data))

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        key = secret_key(kind, namespace, name)
        kv = await self.etcd.get(key)
        return self._open(key, kv.value) if kv is not None else None

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        await self.etcd.delete_range(secret_key(kind, namespace, name))


async def load_pki(secrets: SecretStore, obj: Mapping[str, Any]) -> TenantPki | None:
    """A VirtualCluster's tenant PKI, if it was made for this very object (a recreated one has a new uid)."""
    meta = obj["metadata"]
    stored = await secrets.get(PKI_KIND, meta["namespace"], meta["name"])
    if stored is None or stored.get("uid", b"").decode() != meta.get("uid"):
        return None
    return TenantPki({k: v for k, v in stored.items() if k != "uid"})
