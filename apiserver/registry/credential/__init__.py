"""The VirtualClusterCredential resource's registry: ``strategy.py`` its rules, ``storage.py`` the
registry the server serves it with and the sweep of credentials that open nothing any more."""

from apiserver.registry.credential.storage import CredentialSweeper, new_registry
from apiserver.registry.credential.strategy import CredentialStrategy

__all__ = ["CredentialStrategy", "CredentialSweeper", "new_registry"]
