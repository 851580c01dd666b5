"""How talking to a cluster fails: it answered with a failure, it did not answer, or no credential
could be had to ask it with."""

from __future__ import annotations

from typing import Any

__all__ = ["CredentialError", "HostError", "HostUnavailable"]


class HostError(Exception):
    """The host answered with a failure Status."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        self.code = code
        self.status = status
        self.reason = str(status.get("reason", ""))
        self.message = str(status.get("message", "")) or f"HTTP {code}"
        super().__init__(f"{code} {self.reason}: {self.message}")


class HostUnavailable(Exception):
    """The host did not answer."""


class CredentialError(HostUnavailable):
    """The credential the kubeconfig asks for could not be had (an exec plugin failed, a token file
    was never readable): the request was not sent. The message names the user entry. Callers treat
    it as the host being unavailable: retried, never sent without the credential."""
