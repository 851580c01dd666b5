"""Authentication and authorization delegated to the host cluster, as kube's aggregated servers do.

- :class:`AuthenticationSource` reads (and keeps re-reading) the ConfigMap
  ``kube-system/extension-apiserver-authentication``: the client CA, the requestheader
  CA, allowed front-proxy names and header names. Flags override its values.
- :class:`RequestHeaderAuthenticator` trusts ``X-Remote-*`` headers only when the
  peer certificate was issued by the requestheader CA *and* its CN is allowed.
- :class:`TokenReviewAuthenticator` and :class:`SubjectAccessReviewAuthorizer`
  ask the host, with kube's 10 s caches for both answers.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import ssl
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from apiserver.auth.authn import (
    SYSTEM_MASTERS,
    Attributes,
    CABundle,
    UserInfo,
    peer_certificate,
    subject_user,
)
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery import errors

log = logging.getLogger(__name__)

CONFIGMAP_PATH = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
CACHE_TTL = 10.0


@dataclass
class RequestHeaderConfig:
    ca: CABundle | None = None
    allowed_names: list[str] = field(default_factory=list)
    username_headers: list[str] = field(default_factory=list)
    group_headers: list[str] = field(default_factory=list)
    extra_prefixes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Header names as they are matched: lower-case bytes, with their place in the configured order.
        self._users = {h.lower().encode(): i for i, h in enumerate(self.username_headers)}
        self._groups = {h.lower().encode(): i for i, h in enumerate(self.group_headers)}
        self._prefixes = [p.lower().encode() for p in self.extra_prefixes]

    def identity(self, raw_headers: Iterable[tuple[bytes, bytes]]) -> UserInfo | None:
        """The user the front proxy vouches for, read in one pass over the request's headers.

        As kube reads them: the first non-empty value of the username headers (in their configured
        order), every value of the group headers (in theirs), and each extra header's
        percent-decoded, lower-cased key suffix.
        """
        users: list[tuple[int, str]] = []
        groups: list[tuple[int, str]] = []
        extra: dict[str, tuple[str, ...]] = {}
        for raw_name, raw_value in raw_headers:
            name = raw_name.lower()
            if (i := self._users.get(name)) is not None:
                if raw_value:
                    users.append((i, raw_value.decode("utf-8", "surrogateescape")))
            elif (i := self._groups.get(name)) is not None:
                groups.append((i, raw_value.decode("utf-8", "surrogateescape")))
            else:
                for prefix in self._prefixes:
                    if name.startswith(prefix):
                        key = _extra_key(name[len(prefix):])
                        extra[key] = (*extra.get(key, ()), raw_value.decode("utf-8", "surrogateescape"))
                        break
        if not users:
            return None
        users.sort(key=lambda u: u[0])  # stable: values of one header keep their order
        groups.sort(key=lambda g: g[0])
        return UserInfo(users[0][1], tuple(g for _, g in groups), "", extra)


@dataclass
class Overrides:
    """Flag values that take precedence over the ConfigMap (empty = use the ConfigMap)."""

    client_ca: bytes = b""
    requestheader_ca: bytes = b""
    allowed_names: list[str] | None = None
    username_headers: list[str] | None = None
    group_headers: list[str] | None = None
    extra_prefixes: list[str] | None = None


@functools.lru_cache(maxsize=1024)  # the same few keys arrive on every request of a user
def _extra_key(raw: bytes) -> str:
    return urllib.parse.unquote(raw.decode("utf-8", "surrogateescape"))


class AuthenticationSource:
    """The host's authentication settings for extension servers, kept current."""

    def __init__(self, client: KubeClient | None, overrides: Overrides, serving: ssl.SSLContext,
                 refresh: float = 30.0) -> None:
        self.client = client
        self.overrides = overrides
        self.serving = serving
        self.refresh = refresh
        self.client_ca: CABundle | None = CABundle(overrides.client_ca) if overrides.client_ca else None
        self.requestheader = RequestHeaderConfig()
        self._trusted: set[bytes] = set()
        self._task: asyncio.Task[None] | None = None
        self._apply({})

    async def start(self) -> None:
        if self.client is None:
            return
        deadline = time.monotonic() + 30
        while True:
            try:
                await self.load()
                break
            except (HostError, HostUnavailable) as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cannot read {CONFIGMAP_PATH} from the host: {e}") from e
                log.warning("waiting for the host's authentication ConfigMap: %s", e)
                await asyncio.sleep(1)
        self._task = asyncio.create_task(self._poll(), name="authentication-configmap")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def load(self) -> None:
        assert self.client is not None
        cm = await self.client.get(CONFIGMAP_PATH)
        self._apply(cm.get("data") or {})

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.refresh)
            try:
                await self.load()
            except (HostError, HostUnavailable) as e:
                log.warning("keeping the last authentication settings: %s", e)

    @staticmethod
    def _bundle(current: CABundle | None, pem: bytes) -> CABundle | None:
        """Keep the same bundle (and its verification cache) while the PEM is unchanged."""
        if not pem.strip():
            return None
        return current if current is not None and current.pem == pem else CABundle(pem)

    def _apply(self, data: dict[str, str]) -> None:
        o = self.overrides

        def strings(key: str, override: list[str] | None) -> list[str]:
            if override is not None:
                return override
            return list(json.loads(data[key])) if data.get(key) else []
        client_ca = o.client_ca or data.get("client-ca-file", "").encode()
        rh_ca = o.requestheader_ca or data.get("requestheader-client-ca-file", "").encode()
        self.client_ca = self._bundle(self.client_ca, client_ca)
        self.requestheader = RequestHeaderConfig(
            ca=self._bundle(self.requestheader.ca, rh_ca),
            allowed_names=strings("requestheader-allowed-names", o.allowed_names),
            username_headers=strings("requestheader-username-headers", o.username_headers),
            group_headers=strings("requestheader-group-headers", o.group_headers),
            extra_prefixes=strings("requestheader-extra-headers-prefix", o.extra_prefixes))
        for pem in (client_ca, rh_ca):
            if pem.strip() and pem not in self._trusted:
                # A handshake must accept certificates of both CAs; which one issued a
                # certificate is decided per request by the authenticators.
                self.serving.load_verify_locations(cadata=pem.decode())
                self._trusted.add(pem)


class RequestHeaderAuthenticator:
    """The front proxy's identity headers, trusted only from the front proxy."""

    def __init__(self, source: AuthenticationSource) -> None:
        self.source = source

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        config = self.source.requestheader
        cert = peer_certificate(request)
        if cert is None or config.ca is None or not config.ca.issued(cert):
            return None
        proxy = subject_user(cert)
        if config.allowed_names and (proxy is None or proxy.name not in config.allowed_names):
            raise errors.ApiError(401, "Unauthorized", "Unauthorized")
        return config.identity(request.raw_headers)


class _TTLCache:
    def __init__(self) -> None:
        self._data: dict[str, tuple[float, Any]] = {}

    def get(self, key: str) -> Any | None:
        hit = self._data.get(key)
        if hit is None:
            return None
        if hit[0] < time.monotonic():
            del self._data[key]
            return None
        return hit[1]

    def put(self, key: str, value: Any, ttl: float) -> None:
        if len(self._data) > 10_000:
            now = time.monotonic()
            self._data = {k: v for k, v in self._data.items() if v[0] >= now}
        self._data[key] = (time.monotonic() + ttl, value)


async def ask_host(client: KubeClient, path: str, review: dict[str, Any], what: str) -> dict[str, Any]:
    """POST a review to the host; its status, or a 503 (host down) / 500 (host refused) Status."""
    try:
        result = await client.create(path, review)
    except HostUnavailable as e:
        log.warning("%s failed: %s", review["kind"], e)
        raise errors.service_unavailable(f"the host cluster cannot {what} right now") from None
    except HostError as e:
        log.warning("%s refused: %s", review["kind"], e)
        raise errors.internal(f"the host cluster refused to {what}") from None
    return dict(result.get("status") or {})


class TokenReviewAuthenticator:
    """Bearer tokens, reviewed by the host (authentication.k8s.io/v1 TokenReview)."""

    def __init__(self, client: KubeClient, ttl: float = CACHE_TTL) -> None:
        self.client = client
        self.ttl = ttl
        self._cache = _TTLCache()

    async def authenticate(self, request: web.Request) -> UserInfo | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            return cached or None
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = await ask_host(self.client, "/apis/authentication.k8s.io/v1/tokenreviews", review,
                                "review the token")
        user: UserInfo | bool = False
        if status.get("authenticated"):
            info = status.get("user") or {}
            user = UserInfo(info.get("username", ""), tuple(info.get("groups") or ()), info.get("uid", ""),
                            {k: tuple(v) for k, v in (info.get("extra") or {}).items()})
        self._cache.put(key, user, self.ttl)
        return user or None


class SubjectAccessReviewAuthorizer:
    """Decisions by the host (authorization.k8s.io/v1 SubjectAccessReview), cached like kube's."""

    def __init__(self, client: KubeClient, allow_ttl: float = CACHE_TTL, deny_ttl: float = CACHE_TTL) -> None:
        self.client = client
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self._cache = _TTLCache()

    def review(self, user: UserInfo, attrs: Attributes) -> dict[str, Any]:
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        if attrs.resource_request:
            spec["resourceAttributes"] = {
                "namespace": attrs.namespace, "verb": attrs.verb, "group": attrs.group,
                "version": attrs.version, "resource": attrs.resource, "subresource": attrs.subresource,
                "name": attrs.name}
        else:
            spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}

    async def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        if SYSTEM_MASTERS in user.groups:
            return True, ""
        review = self.review(user, attrs)
        key = orjson.dumps(review["spec"], option=orjson.OPT_SORT_KEYS).decode()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        status = await ask_host(self.client, "/apis/authorization.k8s.io/v1/subjectaccessreviews", review,
                                "authorize the request")
        decision = (bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or ""))
        self._cache.put(key, decision, self.allow_ttl if decision[0] else self.deny_ttl)
        return decision
