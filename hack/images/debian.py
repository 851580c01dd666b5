"""Root filesystems from Debian's packages, without a package manager in them.

The packages and their dependencies are resolved against the machine's apt lists (the
candidate versions, ``apt-cache show``), downloaded once into a cache with ``apt-get download``
(checked against the lists' SHA256) and unpacked with ``dpkg-deb``. No maintainer script runs:
what those would have made (``update-alternatives`` links, say) each image makes itself. What an
image does not use (documentation, manuals, locales, glibc's iconv modules) is left out; copyright
files stay.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# Never needed in an image that is not managed by dpkg: package tooling and what only it pulls in.
EXCLUDED = frozenset({
    "dpkg", "debconf", "debconf-2.0", "cdebconf", "perl-base", "debianutils", "init-system-helpers",
    "tar", "gzip", "coreutils", "install-info", "readline-common", "sensible-utils", "lsb-base",
    "sysvinit-utils", "usrmerge", "libc-bin",
    "base-files",  # the distribution's /etc files (its own depends on the virtual awk): images bring their own
})
DROPPED = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/",
           "usr/share/bug/", "usr/share/doc-base/", "usr/share/bash-completion/", "usr/share/zsh/",
           "usr/share/gdb/", "etc/cron.daily/", "etc/logrotate.d/", "usr/share/menu/",
           "usr/lib/x86_64-linux-gnu/gconv/")  # glibc's iconv modules: Python has its own codecs
ARCH = "amd64"


class DebianError(RuntimeError):
    pass


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    filename: str  # the pool path, e.g. pool/main/p/python3.11/python3.11-minimal_3.11.2-6_amd64.deb
    sha256: str
    depends: tuple[tuple[str, ...], ...]  # Pre-Depends and Depends: groups of alternatives
    provides: tuple[str, ...] = ()  # virtual packages it stands for (nginx-light: nginx-abi-1.22.1-7)

    @property
    def deb_name(self) -> str:
        return Path(self.filename).name


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload,no-any-return]
    except FileNotFoundError:
        raise DebianError(f"{cmd[0]} is not installed: this needs Debian's apt and dpkg") from None


def parse_depends(field: str) -> tuple[tuple[str, ...], ...]:
    """``a (>= 1) | b:any, c`` -> ``(("a", "b"), ("c",))``: names only, architecture qualifiers dropped."""
    groups = []
    for group in field.split(","):
        names = []
        for alt in group.split("|"):
            alt = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip()
            if alt:
                names.append(alt.split(":", 1)[0])
        if names:
            groups.append(tuple(names))
    return tuple(groups)


def parse_stanzas(text: str) -> dict[str, Package]:
    out: dict[str, Package] = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" not in fields or "Version" not in fields:
            continue
        depends = parse_depends(fields.get("Pre-Depends", "")) + parse_depends(fields.get("Depends", ""))
        provides = tuple(n for g in parse_depends(fields.get("Provides", "")) for n in g)
        out.setdefault(fields["Package"], Package(fields["Package"], fields["Version"], fields.get("Filename", ""),
                                                  fields.get("SHA256", ""), depends, provides))
    return out


def show(names: Iterable[str]) -> dict[str, Package]:
    """The candidate version of each real package among ``names`` (virtual ones are absent)."""
    names = sorted(set(names))
    if not names:
        return {}
    proc = _run(["apt-cache", "show", "--no-all-versions", *names])
    found = parse_stanzas(proc.stdout)
    if not found and proc.returncode:
        raise DebianError(f"apt-cache show failed: {proc.stderr.strip()[-500:]}")
    return {n: p for n, p in found.items() if n in names}


def resolve(roots: Iterable[str], exclude: Iterable[str] = EXCLUDED, follow: Callable[[str], bool] = lambda n: True
            ) -> dict[str, Package]:
    """``roots`` and everything they depend on, by candidate version; a group of alternatives takes
    its first real package (unless one of the group is taken already). ``exclude``d names and their
    dependencies are left out; a package for which ``follow(name)`` is false comes without its own."""
    exclude, roots = set(exclude), list(roots)
    known: dict[str, Package | None] = {}

    def lookup(names: Iterable[str]) -> None:
        new = {n for n in names if n not in known}
        found = show(new)
        for n in new:
            known[n] = found.get(n)

    lookup(roots)
    if missing := sorted(r for r in roots if known[r] is None):
        raise DebianError(f"no candidate for {', '.join(missing)} in the apt lists "
                          "(run hack/node-packages.sh, which runs apt-get update)")
    taken: dict[str, Package] = {}
    queue = list(dict.fromkeys(roots))
    while queue:
        batch, queue = queue, []
        for n in batch:
            taken[n] = known[n]  # type: ignore[assignment]
        groups = [(n, g) for n in batch if follow(n) for g in taken[n].depends]
        lookup(a for _, g in groups for a in g if a not in exclude)
        provided = {v for t in (*taken, *queue) for v in (known[t].provides if known.get(t) else ())}
        for n, group in groups:
            if any(a in taken or a in queue or a in exclude or a in provided for a in group):
                continue
            real = [a for a in group if known.get(a) is not None]
            if not real:
                raise DebianError(f"{n} depends on {' | '.join(group)}: no such package here "
                                  "(exclude it, or add a package that provides it)")
            queue.append(real[0])
    return dict(sorted(taken.items()))


def fetch(packages: Iterable[Package], debdir: Path) -> list[Path]:
    """The .deb of each package in ``debdir``, downloaded when absent; each checked against the
    SHA256 of the apt lists."""
    debdir.mkdir(parents=True, exist_ok=True)
    packages = list(packages)
    todo = [p for p in packages if not _good(debdir / p.deb_name, p.sha256)]
    if todo:
        proc = _run(["apt-get", "download", "-q", *[f"{p.name}={p.version}" for p in todo]], cwd=debdir)
        if proc.returncode:
            raise DebianError(f"apt-get download failed: {proc.stderr.strip()[-800:]}")
    paths = []
    for p in packages:
        path = debdir / p.deb_name
        if not path.exists():  # apt-get download names the file after the version, epoch included
            for alt in (debdir / f"{p.name}_{p.version.replace(':', '%3a')}_{ARCH}.deb",
                        debdir / f"{p.name}_{p.version.replace(':', '%3a')}_all.deb"):
                if alt.exists():
                    alt.rename(path)
        if not _good(path, p.sha256):
            raise DebianError(f"{path}: missing or not the SHA256 the apt lists give ({p.sha256})")
        paths.append(path)
    return paths


def _good(path: Path, sha256: str) -> bool:
    if not path.exists():
        return False
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return not sha256 or h.hexdigest() == sha256


def dropped(rel: str) -> bool:
    """Documentation and the like, except each package's copyright file."""
    rel = rel.lstrip("./")
    if rel.startswith("usr/share/doc/"):
        return not rel.endswith("/copyright") and rel.count("/") > 3
    return any(rel.startswith(d) or rel + "/" == d for d in DROPPED)


def unpack(deb: Path, dest: Path, only: Iterable[str] | None = None) -> None:
    """``dpkg-deb -x`` (or, with ``only``, just those paths of the package)."""
    dest.mkdir(parents=True, exist_ok=True)
    if only is None:
        proc = _run(["dpkg-deb", "-x", str(deb), str(dest)])
        if proc.returncode:
            raise DebianError(f"dpkg-deb -x {deb.name} failed: {proc.stderr.strip()[-500:]}")
        return
    wanted = {p.lstrip("/") for p in only}
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for m in tar:
            if m.name.lstrip("./") in wanted:
                tar.extract(m, dest, filter="tar")
                wanted.discard(m.name.lstrip("./"))
    if proc.wait() or wanted:
        raise DebianError(f"{deb.name}: could not take {', '.join(sorted(wanted)) or 'its files'}")


def build_root(packages: dict[str, Package], debdir: Path, dest: Path,
               only: dict[str, list[str]] | None = None) -> None:
    """Unpack ``packages`` into ``dest`` (``only[name]`` restricts a package to some of its paths),
    then drop documentation."""
    only = only or {}
    for pkg, deb in zip(packages.values(), fetch(packages.values(), debdir), strict=True):
        unpack(deb, dest, only.get(pkg.name))
    for d in DROPPED:
        shutil.rmtree(dest / d, ignore_errors=True)
    doc = dest / "usr/share/doc"
    if doc.is_dir():
        for path in sorted(doc.rglob("*"), reverse=True):
            rel = path.relative_to(dest).as_posix()
            if path.is_symlink() or path.is_file():
                if dropped(rel):
                    path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


def key(packages: dict[str, Package]) -> list[list[str]]:
    return [[p.name, p.version, p.sha256] for p in packages.values()]


# -- shared libraries ---------------------------------------------------------------------------

LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib", "lib64", "usr/lib64")


def elf_needs(path: Path) -> tuple[list[str], list[str]] | None:
    """(NEEDED sonames, RUNPATH/RPATH entries) of an ELF file, None for anything else."""
    with path.open("rb") as f:
        if f.read(4) != b"\x7fELF":
            return None
    proc = _run(["readelf", "-d", "-W", str(path)])
    if proc.returncode:
        raise DebianError(f"readelf -d {path} failed: {proc.stderr.strip()}")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", proc.stdout)
    paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.+?)\]", proc.stdout)
    return needed, [d for p in paths for d in p.split(":")]


def missing_libraries(root: Path) -> list[str]:
    """``file: soname`` for each shared library an ELF file in ``root`` needs and ``root`` lacks."""
    missing = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        needs = elf_needs(path)
        if not needs:
            continue
        needed, runpath = needs
        rel_dir = path.parent.relative_to(root).as_posix()
        dirs = [d.replace("$ORIGIN", rel_dir).lstrip("/") for d in runpath] + list(LIB_DIRS)
        for soname in needed:
            if not any(_inside(root, d, soname) for d in dirs):
                missing.append(f"/{path.relative_to(root).as_posix()}: {soname}")
    return missing


def _inside(root: Path, d: str, soname: str) -> bool:
    """Resolve a symlink chain inside ``root`` (absolute links point into the root, not the host)."""
    rel = (Path(d) / soname).as_posix()
    for _ in range(40):
        p = root / rel
        if p.is_symlink():
            target = p.readlink().as_posix()
            rel = target.lstrip("/") if target.startswith("/") else (Path(rel).parent / target).as_posix()
            continue
        return p.is_file()
    return False
