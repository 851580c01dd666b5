"""kubeconfig files as kubectl reads them: which cluster to talk to, and with which credential.

The credentials of client-go that a client without a terminal can use:

- a client certificate (``client-certificate``/``client-key``, as files or ``-data``);
- a bearer token, inline (``token``) or in a file (``tokenFile``); the file is read again as
  soon as it changes, so a rotated bound service-account token is picked up, and the last token
  read is kept while the file cannot be read;
- an exec credential plugin (``exec``, client.authentication.k8s.io/v1 and v1beta1), as EKS,
  GKE and AKS kubeconfigs use: the command runs with its args and env, without a terminal, and
  ``KUBERNETES_EXEC_INFO`` holds the ExecCredential it is asked for (``spec.interactive``
  false; the cluster when ``provideClusterInfo``). The token or client certificate it prints is
  used until its ``expirationTimestamp``, and the plugin runs again after a 401.

As in client-go, a token or client certificate in the user entry takes precedence over its exec
plugin, and a tokenFile over a token. Whatever this client cannot use is refused when the
kubeconfig is loaded, naming the user entry: a legacy ``auth-provider``, basic authentication,
impersonation, an exec plugin that must be interactive, a user entry with nothing usable in it.
A request is never sent without the credential the kubeconfig asks for.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml

from apiserver.kubeclient.errors import CredentialError
from apiserver.machinery import incluster
from apiserver.machinery.incluster import running_in_cluster
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import parse_rfc3339

__all__ = [
    "Auth", "ClusterAccess", "Credentials", "ExecPlugin", "KubeconfigError", "TokenFile",
    "access_from_pem", "access_of", "in_cluster", "load_kubeconfig", "parse_kubeconfig", "running_in_cluster",
]

log = logging.getLogger(__name__)

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
EXEC_CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"  # a cluster's per-plugin config (provideClusterInfo)
EXEC_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
EXEC_TIMEOUT = 60.0  # seconds a plugin may take; client-go waits forever, a server cannot
IMPERSONATION = ("as", "as-uid", "as-groups", "as-user-extra")


class KubeconfigError(ValueError):
    """A kubeconfig this client cannot use; the message names the file and the entry."""


@dataclass(frozen=True)
class Auth:
    """What one request carries: the TLS context (the cluster's CA, maybe a client certificate)
    and maybe a bearer token."""

    ssl: ssl.SSLContext
    token: str = ""


class CredentialSource(Protocol):
    async def current(self) -> Auth:
        """The credential for the next request; CredentialError when there is none to be had."""

    async def rejected(self, used: Auth) -> bool:
        """The server answered 401 to ``used``: True when another credential is now current,
        worth one more try."""


class Credentials:
    """A credential that does not change: a TLS context and maybe a token."""

    def __init__(self, sslctx: ssl.SSLContext, token: str = "") -> None:
        self._auth = Auth(sslctx, token)

    async def current(self) -> Auth:
        return self._auth

    async def rejected(self, used: Auth) -> bool:
        return False


class TokenFile:
    """A bearer token read from a file, and read again whenever the file changes (kubelet rotates
    projected service-account tokens by replacing the file). A file that cannot be read or is
    empty later keeps the last token (client-go does the same); at the start it is an error."""

    def __init__(self, path: Path, sslctx: ssl.SSLContext, owner: str) -> None:
        self.path = path
        self.owner = owner
        self._ssl = sslctx
        try:
            self._seen = self._stamp()
            self._auth = Auth(sslctx, self._read())
        except (OSError, ValueError) as e:
            raise KubeconfigError(f"{owner}: cannot use tokenFile {path}: {e}") from None

    def _stamp(self) -> tuple[int, int, int, int]:
        st = self.path.stat()
        return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size

    def _read(self) -> str:
        token = self.path.read_text().strip()
        if not token:
            raise ValueError("the file is empty")
        return token

    def _refresh(self, force: bool = False) -> None:
        try:
            stamp = self._stamp()
            if stamp == self._seen and not force:
                return
            token = self._read()
        except (OSError, ValueError) as e:
            log.warning("%s: tokenFile %s cannot be read (%s); keeping the last token", self.owner, self.path, e)
            return
        self._seen = stamp
        if token != self._auth.token:
            self._auth = Auth(self._ssl, token)

    async def current(self) -> Auth:
        self._refresh()
        return self._auth

    async def rejected(self, used: Auth) -> bool:
        self._refresh(force=True)
        return self._auth != used


class ExecPlugin:
    """Credentials from an exec plugin (client-go's plugin/pkg/client/auth/exec): run when there is
    no credential yet, when the last one expired, and once after a 401 to the current one; one run
    at a time."""

    def __init__(self, owner: str, config: Obj, cluster: Obj, tls: TlsFactory, plain: ssl.SSLContext,
                 base: Path) -> None:
        self.owner = owner
        if not isinstance(config, dict):
            raise KubeconfigError(f"{owner}: exec must be a mapping")
        command = config.get("command")
        if not command or not isinstance(command, str):
            raise KubeconfigError(f"{owner}: command must be specified to use the exec plugin")
        # as clientcmd: a command with a path separator is relative to the kubeconfig, a bare name is on PATH
        self.command = str(base / command) if "/" in command and not os.path.isabs(command) else command
        self.api_version = config.get("apiVersion") or ""
        if self.api_version not in EXEC_API_VERSIONS:
            raise KubeconfigError(f"{owner}: exec plugin apiVersion {self.api_version!r} is not supported "
                                  f"(use one of {', '.join(EXEC_API_VERSIONS)})")
        args = config.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise KubeconfigError(f"{owner}: exec args must be a list of strings")
        self.args: list[str] = args
        self.env: dict[str, str] = {}
        for entry in config.get("env") or []:
            if not isinstance(entry, dict) or not entry.get("name"):
                raise KubeconfigError(f"{owner}: env variable name must be specified to use the exec plugin")
            self.env[str(entry["name"])] = str(entry.get("value") or "")
        mode = config.get("interactiveMode") or ("" if self.api_version.endswith("/v1") else "IfAvailable")
        if not mode:
            raise KubeconfigError(f"{owner}: interactiveMode must be specified to use the exec plugin "
                                  f"({self.api_version})")
        if mode not in EXEC_INTERACTIVE_MODES:
            raise KubeconfigError(f"{owner}: invalid interactiveMode {mode!r}")
        if mode == "Always":
            raise KubeconfigError(f"{owner}: the exec plugin {command} needs a terminal (interactiveMode: Always), "
                                  f"which a server has not; use a plugin that works non-interactively")
        self.install_hint = str(config.get("installHint") or "")
        self.cluster = _exec_cluster(cluster, tls.ca) if config.get("provideClusterInfo") else None
        self._tls = tls
        self._plain = plain  # the cluster's TLS context, for a plugin that gives a token
        self._lock = asyncio.Lock()
        self._auth: Auth | None = None
        self._pair: tuple[str, str] = ("", "")
        self._expires: dt.datetime | None = None

    def _fail(self, what: str) -> CredentialError:
        return CredentialError(f"{self.owner}: exec plugin {self.command}: {what}")

    def _fresh(self) -> bool:
        return self._auth is not None and (self._expires is None or dt.datetime.now(dt.UTC) < self._expires)

    async def current(self) -> Auth:
        async with self._lock:
            if not self._fresh():
                await self._run()
            assert self._auth is not None
            return self._auth

    async def rejected(self, used: Auth) -> bool:
        async with self._lock:
            if self._auth is used:  # not rotated meanwhile: run the plugin again
                try:
                    await self._run()
                except CredentialError as e:
                    log.warning("refreshing credentials after a 401: %s", e)
                    return False
            return self._auth != used

    def exec_info(self) -> str:
        """The ExecCredential handed to the plugin in ``KUBERNETES_EXEC_INFO``."""
        spec: Obj = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = self.cluster
        return orjson.dumps({"kind": "ExecCredential", "apiVersion": self.api_version, "spec": spec}).decode()

    async def _run(self) -> None:
        env = {**os.environ, **self.env, EXEC_INFO_ENV: self.exec_info()}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command, *self.args, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError:
            hint = f" ({self.install_hint.strip()})" if self.install_hint.strip() else ""
            raise self._fail(f"executable not found{hint}") from None
        except OSError as e:
            raise self._fail(f"cannot be run: {e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), EXEC_TIMEOUT)
        except TimeoutError:
            raise self._fail(f"did not finish within {EXEC_TIMEOUT:g}s") from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            said = err.decode(errors="replace").strip()[-500:]
            raise self._fail(f"failed with exit code {proc.returncode}" + (f": {said}" if said else ""))
        if err.strip():
            log.debug("%s: exec plugin %s said: %s", self.owner, self.command, err.decode(errors="replace")[-500:])
        self._accept(out)

    def _accept(self, out: bytes) -> None:
        """Take the ExecCredential the plugin printed, or say why it is none."""
        try:
            cred = orjson.loads(out)
        except orjson.JSONDecodeError:
            raise self._fail(f"printed something that is not an ExecCredential: {_excerpt(out)}") from None
        if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
            raise self._fail(f"printed something that is not an ExecCredential: {_excerpt(out)}")
        if cred.get("apiVersion") != self.api_version:
            raise self._fail(f"expected an ExecCredential of API version {self.api_version}, "
                             f"the plugin returned version {cred.get('apiVersion')}")
        status = cred.get("status")
        if not isinstance(status, dict):
            raise self._fail("the ExecCredential has no status")
        token, cert, key = (status.get(k) or "" for k in ("token", "clientCertificateData", "clientKeyData"))
        if not all(isinstance(v, str) for v in (token, cert, key)):
            raise self._fail("the ExecCredential's token and client certificate must be strings")
        if not token and not cert and not key:
            raise self._fail("the ExecCredential has neither a token nor a client certificate and key")
        if bool(cert) != bool(key):
            raise self._fail("the ExecCredential has only a client certificate or only a key, not both")
        expires = None
        if status.get("expirationTimestamp"):
            try:
                expires = parse_rfc3339(str(status["expirationTimestamp"]))
            except ValueError:
                raise self._fail(f"invalid expirationTimestamp {status['expirationTimestamp']!r}") from None
        if not cert:
            sslctx = self._plain
        elif self._auth is not None and self._pair == (cert, key):
            sslctx = self._auth.ssl  # the same certificate: the same context, the connections stay
        else:
            try:
                sslctx = self._tls.context(cert.encode(), key.encode())
            except (ssl.SSLError, OSError) as e:
                raise self._fail(f"the client certificate and key cannot be used: {e}") from None
        self._pair = (cert, key)
        self._auth = Auth(sslctx, token)
        self._expires = expires


def _excerpt(out: bytes) -> str:
    text = out.decode(errors="replace").strip()
    return repr(text[:200]) if text else "nothing"


@dataclass
class ClusterAccess:
    """Where a cluster is and how requests authenticate to it."""

    server: str
    ssl: ssl.SSLContext
    token: str = ""
    credentials: CredentialSource | None = None  # what requests carry (None: ``ssl`` and ``token``)
    tls_server_name: str = ""  # the name the server's certificate is checked against, when not the host's

    def credential_source(self) -> CredentialSource:
        return self.credentials if self.credentials is not None else Credentials(self.ssl, self.token)


@dataclass(frozen=True)
class TlsFactory:
    """TLS contexts for one cluster: its CA (or none to verify with), with a client certificate or not."""

    ca: bytes | None
    insecure: bool = False

    def context(self, cert: bytes | None = None, key: bytes | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca.decode() if self.ca else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cert and key:
            _load_chain(ctx, cert, key)
        return ctx


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl only loads client certificates from files: write them privately, load, remove."""
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_path.write_bytes(cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        ctx.load_cert_chain(str(cert_path), str(key_path))


def _pem(entry: Obj, key: str, base: Path, owner: str) -> bytes | None:
    """``<key>-data`` (base64) or the file ``<key>`` (relative to the kubeconfig), if either is set."""
    try:
        if entry.get(f"{key}-data"):
            return base64.b64decode(entry[f"{key}-data"])
        if entry.get(key):
            return _path(str(entry[key]), base).read_bytes()
    except (OSError, binascii.Error, TypeError) as e:
        raise KubeconfigError(f"{owner}: cannot read {key}: {e}") from None
    return None


def _path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _named(config: Obj, section: str, kind: str, name: str) -> Obj | None:
    for item in config.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            entry = item.get(kind)
            return entry if isinstance(entry, dict) else {}
    return None


def _exec_cluster(cluster: Obj, ca: bytes | None) -> Obj:
    """The cluster as an exec plugin is told about it (client.authentication.k8s.io Cluster)."""
    info: Obj = {"server": cluster["server"]}
    if cluster.get("tls-server-name"):
        info["tls-server-name"] = cluster["tls-server-name"]
    if cluster.get("insecure-skip-tls-verify"):
        info["insecure-skip-tls-verify"] = True
    if ca:
        info["certificate-authority-data"] = base64.b64encode(ca).decode()
    if cluster.get("disable-compression"):
        info["disable-compression"] = True
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == EXEC_CLUSTER_EXTENSION:
            info["config"] = ext.get("extension")
    return info


def _credentials(owner: str, user: Obj, cluster: Obj, tls: TlsFactory,
                 base: Path) -> tuple[ssl.SSLContext, CredentialSource]:
    """The TLS context (with the entry's client certificate, if any) and the credential a user
    entry asks for, in client-go's order; or why it cannot be used."""
    provider = user.get("auth-provider")
    if provider:
        name = provider.get("name", "") if isinstance(provider, dict) else ""
        raise KubeconfigError(f"{owner}: the legacy auth-provider {name!r} is not supported (client-go removed its "
                              f"built-in providers); use an exec credential plugin instead, e.g. "
                              f"gke-gcloud-auth-plugin on GKE or kubelogin on AKS and for OIDC")
    if user.get("username") or user.get("password"):
        raise KubeconfigError(f"{owner}: basic authentication (username/password) is not supported: kube-apiserver "
                              f"removed it in v1.19; use a token, a client certificate or an exec plugin")
    impersonation = [k for k in IMPERSONATION if user.get(k)]
    if impersonation:
        raise KubeconfigError(f"{owner}: impersonation ({', '.join(impersonation)}) is not supported")
    has_cert = bool(user.get("client-certificate") or user.get("client-certificate-data"))
    has_key = bool(user.get("client-key") or user.get("client-key-data"))
    if has_cert != has_key:
        missing = "client-key-data or client-key" if has_cert else "client-certificate-data or client-certificate"
        raise KubeconfigError(f"{owner}: {missing} must be specified to use a client certificate")
    cert, key = _pem(user, "client-certificate", base, owner), _pem(user, "client-key", base, owner)
    try:
        sslctx = tls.context(cert, key)
    except ssl.SSLError as e:
        raise KubeconfigError(f"{owner}: the client certificate and key cannot be used: {e}") from None
    if user.get("tokenFile"):
        return sslctx, TokenFile(_path(str(user["tokenFile"]), base), sslctx, owner)
    if user.get("token"):
        return sslctx, Credentials(sslctx, str(user["token"]))
    if cert:
        return sslctx, Credentials(sslctx)
    if user.get("exec"):
        return sslctx, ExecPlugin(owner, user["exec"], cluster, tls, sslctx, base)
    meant = sorted(k for k in user if k != "extensions")
    if meant:  # keys set but nothing usable: sending without a credential is not what was meant
        raise KubeconfigError(f"{owner} has no credential this client can use (it sets {', '.join(meant)}, "
                              f"all empty or unknown)")
    return sslctx, Credentials(sslctx)  # no user, or an empty one: anonymous, as kubectl


def load_kubeconfig(path: str | Path, context: str | None = None) -> ClusterAccess:
    """The cluster and credential of ``context`` (default: the current context) in a kubeconfig file."""
    path = Path(path)
    where = f"kubeconfig {path}"
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise KubeconfigError(f"{where}: {e}") from None
    return access_of(config, where, path.parent, context)


def parse_kubeconfig(data: bytes, where: str) -> tuple[ClusterAccess, bytes | None]:
    """The current context of a kubeconfig held in memory (a Secret's), and its cluster's CA (None: the
    system's). Files it names are not read: what it needs must be inline."""
    try:
        config = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise KubeconfigError(f"{where}: {e}") from None
    access = access_of(config, where, Path("/nonexistent"))
    ctx = _named(config, "contexts", "context", config["current-context"]) or {}
    cluster = _named(config, "clusters", "cluster", ctx.get("cluster") or "") or {}
    return access, _pem(cluster, "certificate-authority", Path("/nonexistent"), where)


def access_of(config: Any, where: str, base: Path, context: str | None = None) -> ClusterAccess:
    """The cluster and credential of ``context`` (default: the current one) in a parsed kubeconfig; relative
    file names are read from ``base``."""
    if not isinstance(config, dict):
        raise KubeconfigError(f"{where}: not a kubeconfig")
    name = context or config.get("current-context")
    if not name:
        raise KubeconfigError(f"{where}: no current-context is set")
    ctx = _named(config, "contexts", "context", name)
    if ctx is None:
        raise KubeconfigError(f"{where}: context {name!r} not found")
    cluster = _named(config, "clusters", "cluster", ctx.get("cluster") or "")
    if cluster is None:
        raise KubeconfigError(f"{where}: cluster {ctx.get('cluster')!r} of context {name!r} not found")
    cluster_owner = f"{where}: cluster {ctx.get('cluster')!r}"
    if not cluster.get("server"):
        raise KubeconfigError(f"{cluster_owner} has no server")
    if cluster.get("proxy-url"):
        raise KubeconfigError(f"{cluster_owner}: proxy-url is not supported by this client")
    user_name = ctx.get("user") or ""
    user: Obj = {}
    if user_name:
        found = _named(config, "users", "user", user_name)
        if found is None:
            raise KubeconfigError(f"{where}: user {user_name!r} of context {name!r} not found")
        user = found
    tls = TlsFactory(_pem(cluster, "certificate-authority", base, cluster_owner),
                     bool(cluster.get("insecure-skip-tls-verify")))
    sslctx, credentials = _credentials(f"{where}: user {user_name!r}", user, cluster, tls, base)
    return ClusterAccess(str(cluster["server"]).rstrip("/"), sslctx, credentials=credentials,
                         tls_server_name=str(cluster.get("tls-server-name") or ""))


def access_from_pem(server: str, ca: bytes, cert: bytes, key: bytes) -> ClusterAccess:
    """Access with in-memory PEMs (a tenant's admin credential)."""
    sslctx = TlsFactory(ca).context(cert, key)
    return ClusterAccess(server.rstrip("/"), sslctx)


def in_cluster() -> ClusterAccess:
    """The pod's service account: its token file, re-read when kubelet rotates it."""
    server = incluster.server_url()
    sslctx = ssl.create_default_context(cafile=str(incluster.CA_FILE))
    return ClusterAccess(server, sslctx,
                         credentials=TokenFile(incluster.TOKEN_FILE, sslctx, "in-cluster service account"))
