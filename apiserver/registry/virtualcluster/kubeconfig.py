"""The ``kubeconfig`` subresource's storage: the VirtualCluster it is read from (and a wake request
written to), and the tenant PKI that storage keeps encrypted beside it, which the credential is
minted from. The endpoint (:mod:`apiserver.endpoints.kubeconfig`) decodes the request, decides
and renders; what it reads and writes, it reads and writes here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apiserver.registry.store import Registry
from apiserver.storage.secrets import SecretStore, load_pki
from certs.tenant import TenantPki

__all__ = ["KubeconfigREST"]


class KubeconfigREST:
    def __init__(self, registry: Registry, secrets: SecretStore | None) -> None:
        self.registry = registry
        self._secrets = secrets

    @property
    def keeps_credentials(self) -> bool:
        """Whether tenant PKIs are kept at all: not without a control-plane runtime (no encryption key)."""
        return self._secrets is not None

    async def tenant_pki(self, obj: Mapping[str, Any]) -> TenantPki | None:
        """The PKI made for this very VirtualCluster; None while it is being prepared (or none is kept)."""
        return await load_pki(self._secrets, obj) if self._secrets is not None else None
