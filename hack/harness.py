"""The one harness for real processes: used by ``make up`` and by the test fixtures.

It knows how to make the playground PKI, and how to start, health-check and stop
etcd and vc-apiserver as supervised subprocesses on loopback. Binaries come from
``.local/bin`` (built by ``hack/build-bins.sh``); a missing one is an error, never a
reason to skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from certs import pki

REPO = Path(__file__).resolve().parent.parent
LOCAL = REPO / ".local"
BIN = LOCAL / "bin"


def binary(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make bins` (hack/build-bins.sh) first")
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check, timeout: float, what: str, interval: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:  # the check's failure is the reason we keep waiting
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s" + (f": {last}" if last else ""))


@dataclass
class Proc:
    """A supervised subprocess with its log and pid file."""

    name: str
    args: list[str]
    log: Path
    pidfile: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str] | None = None) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, env={**os.environ, **(env or {})})
        if self.pidfile is not None:
            self.pidfile.parent.mkdir(parents=True, exist_ok=True)
            self.pidfile.write_text(str(self.popen.pid))
        return self

    @property
    def pid(self) -> int | None:
        if self.popen is not None:
            return self.popen.pid
        if self.pidfile is not None and self.pidfile.exists():
            return int(self.pidfile.read_text().strip() or 0) or None
        return None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        pid = self.pid
        if not pid:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def signal(self, sig: int) -> None:
        pid = self.pid
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.pid
        if pid and self.alive():
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.alive():
                self.signal(signal.SIGKILL)
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        if self.pidfile is not None:
            self.pidfile.unlink(missing_ok=True)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


# -- PKI ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pki:
    """The playground's CA, serving certificate and client certificates, as files."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def cert(self, stem: str) -> tuple[Path, Path]:
        return self.dir / f"{stem}.crt", self.dir / f"{stem}.key"

    @classmethod
    def ensure(cls, directory: Path) -> Pki:
        """Create once: CA, ``serving`` (localhost), ``admin`` (system:masters), ``user`` (no groups)."""
        out = cls(directory)
        if (directory / "admin.key").exists():
            return out
        ca = pki.new_ca("vc-apiserver-playground-ca")
        ca.write(directory, "ca")
        pki.new_leaf(ca, "vc-apiserver", hosts=["localhost", "127.0.0.1", "::1"],
                     usages=(pki.SERVER_AUTH,), days=3650).write(directory, "serving")
        pki.new_leaf(ca, "admin", organizations=["system:masters"], days=3650).write(directory, "admin")
        pki.new_leaf(ca, "alice", organizations=["team-a"], days=3650).write(directory, "user")
        return out

    def kubeconfig(self, server: str, user: str = "admin") -> dict:  # type: ignore[type-arg]
        crt, key = self.cert(user)
        return pki.kubeconfig(server, self.ca.read_bytes(), user, crt.read_bytes(), key.read_bytes(),
                              cluster="vc-apiserver")

    def ssl_context(self, user: str | None = "admin") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if user:
            crt, key = self.cert(user)
            ctx.load_cert_chain(str(crt), str(key))
        return ctx


def write_kubeconfig(path: Path, config: dict) -> Path:  # type: ignore[type-arg]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path


# -- etcd ---------------------------------------------------------------------------------

@dataclass
class Etcd:
    data_dir: Path
    client_port: int
    peer_port: int
    log: Path
    pidfile: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def command(self) -> list[str]:
        return [binary("etcd"), "--name", "default", "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{self.peer_port}",
                "--listen-metrics-urls", "", "--log-level", "warn", "--quota-backend-bytes", str(2 * 1024 ** 3),
                "--unsafe-no-fsync=false", *self.extra_args]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                return json.loads(resp.read()).get("health") == "true"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self, timeout: float = 30.0) -> Etcd:
        self.proc = Proc("etcd", self.command(), self.log, self.pidfile).start()
        try:
            wait_until(self.healthy, timeout, "etcd")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.proc.tail()}") from None
        return self

    def stop(self) -> None:
        (self.proc or Proc("etcd", [], self.log, self.pidfile)).stop()


# -- vc-apiserver -----------------------------------------------------------------------------

@dataclass
class ApiServer:
    pki: Pki
    etcd_url: str
    port: int
    log: Path
    pidfile: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        crt, key = self.pki.cert("serving")
        return [sys.executable, "-m", "apiserver", "--bind-address", "127.0.0.1", "--secure-port", str(self.port),
                "--tls-cert-file", str(crt), "--tls-private-key-file", str(key),
                "--client-ca-file", str(self.pki.ca), "--etcd-servers", self.etcd_url, *self.extra_args]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=2,
                                        context=self.pki.ssl_context(None)) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = 30.0) -> ApiServer:
        self.proc = Proc("vc-apiserver", self.command(), self.log, self.pidfile).start(
            env={"PYTHONPATH": str(REPO)})
        try:
            wait_until(self.ready, timeout, "vc-apiserver")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.proc.tail()}") from None
        return self

    def stop(self) -> None:
        (self.proc or Proc("vc-apiserver", [], self.log, self.pidfile)).stop()

    def kubeconfig(self, path: Path, user: str = "admin") -> Path:
        return write_kubeconfig(path, self.pki.kubeconfig(self.url, user))
