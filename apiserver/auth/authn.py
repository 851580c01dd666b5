"""Authentication and authorization.

Authenticators turn a request into a :class:`UserInfo` (or None: not mine to say);
authorizers answer for :class:`Attributes` derived like kube's RequestInfo. The
standalone set is here (client certificates, a static token file, system:masters);
delegation to a host cluster plugs into the same two protocols.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

SYSTEM_MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def with_authenticated(self) -> UserInfo:
        if AUTHENTICATED in self.groups or self.name == ANONYMOUS:
            return self
        return UserInfo(self.name, (*self.groups, AUTHENTICATED), self.uid, self.extra)


ANONYMOUS_USER = UserInfo(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True)
class Attributes:
    """What a request does, as kube's authorizer sees it."""

    verb: str
    path: str
    resource_request: bool = False
    namespace: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    def describe_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


_HEALTH_SUBPATHS = tuple(p + "/" for p in HEALTH_PATHS)


def is_health_path(path: str) -> bool:
    return path in HEALTH_PATHS or path.startswith(_HEALTH_SUBPATHS)


class Authenticator(Protocol):
    async def authenticate(self, request: web.Request) -> UserInfo | None: ...


class Authorizer(Protocol):
    async def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]: ...


# -- authenticators --------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def _parse_der(der: bytes) -> x509.Certificate:
    return x509.load_der_x509_certificate(der)


def peer_certificate(request: web.Request) -> x509.Certificate | None:
    """The client certificate of this connection (the handshake already verified its chain)."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return _parse_der(der) if der else None


class CABundle:
    """A set of CA certificates, able to say whether one issued a given leaf."""

    def __init__(self, pem: bytes) -> None:
        self.pem = pem
        self.certs = x509.load_pem_x509_certificates(pem) if pem.strip() else []

    def issued(self, leaf: x509.Certificate, usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.CLIENT_AUTH) -> bool:
        """Whether this bundle issued ``leaf`` for ``usage`` and it is valid now (asked on every request)."""
        valid_from, valid_until, ok = self._verdict(leaf, usage)
        return ok and valid_from <= dt.datetime.now(dt.UTC) <= valid_until

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - bundles live as long as the process; keys are certificates
    def _verdict(self, leaf: x509.Certificate, usage: x509.ObjectIdentifier) -> tuple[dt.datetime, dt.datetime, bool]:
        """What never changes for a certificate: its validity window, usage and signature checks."""
        window = (leaf.not_valid_before_utc, leaf.not_valid_after_utc)
        try:
            usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            if usage not in usages and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in usages:
                return (*window, False)
        except x509.ExtensionNotFound:
            pass
        return (*window, self._signed(leaf))

    def _signed(self, leaf: x509.Certificate) -> bool:
        for ca in self.certs:
            try:
                leaf.verify_directly_issued_by(ca)
                return True
            except (ValueError, TypeError, InvalidSignature):
                continue
        return False


@functools.lru_cache(maxsize=4096)
def subject_user(cert: x509.Certificate) -> UserInfo | None:
    """CN and O of a certificate's subject (certificates come from the parse cache: one answer each)."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    groups = tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return UserInfo(str(names[0].value), groups)


class ClientCertAuthenticator:
    """User = CN, groups = O of a certificate issued by the client CA (never by another trusted CA)."""

    def __init__(self, bundle: Callable[[], CABundle | None]) -> None:
        self.bundle = bundle

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        cert = peer_certificate(request)
        bundle = self.bundle()
        if cert is None or bundle is None or not bundle.issued(cert):
            return None
        return subject_user(cert)


class TokenFileAuthenticator:
    """kube's static token file: ``token,user,uid,"group1,group2"`` per line."""

    def __init__(self, path: str) -> None:
        self.tokens: dict[str, UserInfo] = {}
        with open(path, newline="") as f:
            for row in csv.reader(f):
                if len(row) < 3 or row[0].startswith("#"):
                    continue
                groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) > 3 else ()
                self.tokens[row[0].strip()] = UserInfo(row[1].strip(), groups, row[2].strip())

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.tokens.get(token.strip())


class UnionAuthenticator:
    def __init__(self, authenticators: Sequence[Authenticator]) -> None:
        self.authenticators = list(authenticators)

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        for authenticator in self.authenticators:
            user = await authenticator.authenticate(request)
            if user is not None:
                return user.with_authenticated()
        return None


# -- authorizers -----------------------------------------------------------------------

class AlwaysAllowAuthorizer:
    async def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        return True, ""


class PrivilegedGroupAuthorizer:
    """Standalone mode: system:masters may do everything, everyone else nothing."""

    async def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        return SYSTEM_MASTERS in user.groups, ""


def forbidden_message(user: UserInfo, attrs: Attributes, reason: str = "") -> str:
    """kube's 403 wording."""
    if attrs.resource_request:
        what = f'User "{user.name}" cannot {attrs.verb} resource "{attrs.describe_resource()}" in API group ' \
               f'"{attrs.group}"'
        where = f' in the namespace "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
        message = what + where
    else:
        message = f'User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
    return f"{message}: {reason}" if reason else message
