"""Programs built from their release tarballs, for images that need the upstream program rather than
Debian's build of it. Each tarball is pinned by its SHA-256 and fetched from Debian's mirror, which
keeps the upstream release it packages (``<name>_<version>.orig.tar.*``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MIRROR = "http://deb.debian.org/debian/pool/main"


class SourceError(RuntimeError):
    pass


@dataclass(frozen=True)
class Tarball:
    name: str
    version: str
    sha256: str
    suffix: str = "tar.bz2"

    @property
    def url(self) -> str:
        return f"{MIRROR}/{self.name[0]}/{self.name}/{self.name}_{self.version}.orig.{self.suffix}"

    def fetch(self, cache: Path) -> Path:
        """The tarball in ``cache``, downloaded once and checked against its pinned digest."""
        path = cache / f"{self.name}_{self.version}.orig.{self.suffix}"
        if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == self.sha256:
            return path
        cache.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(self.url, timeout=60) as resp:
                data = resp.read()
        except OSError as e:
            raise SourceError(f"cannot download {self.url}: {e}") from None
        if (digest := hashlib.sha256(data).hexdigest()) != self.sha256:
            raise SourceError(f"{self.url} has SHA-256 {digest}, not the pinned {self.sha256}")
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path


# The busybox release the suite's images are made from (docker.io/library/busybox:1.37.0, Alpine's 3.22).
BUSYBOX = Tarball("busybox", "1.37.0", "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4")


def busybox(cache: Path) -> Path:
    """busybox as its release builds with ``make defconfig``, static: the configuration of Docker's
    busybox image. Debian's build differs where the suite looks: its ash drops environment variables
    whose names are not shell identifiers, and runs its own applets ahead of ``PATH``."""
    out = cache / f"busybox-{BUSYBOX.version}" / "busybox"
    if out.exists():
        return out
    tarball = BUSYBOX.fetch(cache / "sources")
    with tempfile.TemporaryDirectory(prefix="busybox-", dir=cache) as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="tar")
        src = Path(tmp) / f"busybox-{BUSYBOX.version}"
        env = {**os.environ, "KCONFIG_NOTIMESTAMP": "1", "SOURCE_DATE_EPOCH": "0"}
        make = ["make", f"-j{os.cpu_count() or 1}"]
        for step in (["make", "defconfig"], None, [*make, "busybox"]):
            if step is None:
                config = src / ".config"
                config.write_text(config.read_text().replace("# CONFIG_STATIC is not set", "CONFIG_STATIC=y"))
                continue
            proc = subprocess.run(step, cwd=src, env=env, capture_output=True, text=True)
            if proc.returncode:
                raise SourceError(f"busybox {BUSYBOX.version}: {' '.join(step)} failed: {proc.stderr.strip()[-1500:]}")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".busybox.{os.getpid()}")
        shutil.copyfile(src / "busybox", partial)
        partial.chmod(0o755)
        partial.replace(out)
    return out
