"""Image files written by hand, the same bytes every time: layer tars, image configs, archives.

A layer is a :class:`Tree` (paths to entries) written as an uncompressed tar whose entries are
sorted, owned by 0:0, dated ``SOURCE_DATE_EPOCH`` (0 when unset) and carry no user or group
names, so equal inputs give equal digests. An image is written as one tar that is both an OCI
image layout (``oci-layout``, ``index.json``, ``blobs/sha256/``) and a docker archive
(``manifest.json``), as ``docker save`` writes it: ``ctr images import`` and ``docker load``
take it, and the name in ``index.json``'s annotations is the image's full reference.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
ANNOTATION_NAME = "io.containerd.image.name"  # what ctr import names the image
ANNOTATION_REF = "org.opencontainers.image.ref.name"
CHUNK = 1 << 20


def source_date_epoch() -> int:
    """The one timestamp every entry and config carries."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "0")
    try:
        epoch = int(value)
    except ValueError:
        raise ValueError(f"SOURCE_DATE_EPOCH={value!r} is not a whole number of seconds") from None
    if epoch < 0:
        raise ValueError(f"SOURCE_DATE_EPOCH={value!r} is negative")
    return epoch


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def file_capability(*caps: int) -> bytes:
    """A ``security.capability`` xattr (VFS_CAP_REVISION_2, effective) granting ``caps``, as
    ``setcap cap_x=+ep`` writes it."""
    low = high = 0
    for cap in caps:
        if cap < 32:
            low |= 1 << cap
        else:
            high |= 1 << (cap - 32)
    words = (0x02000000 | 0x1, low, 0, high, 0)  # magic|effective, permitted[0], inheritable[0], ...
    return b"".join(w.to_bytes(4, "little") for w in words)


CAP_NET_BIND_SERVICE = 10


@dataclass(frozen=True)
class Entry:
    """One tar member: a directory, a regular file (``data`` or the file at ``source``), a symlink
    or a hard link (``link`` names its target: a path for a hard link, anything for a symlink)."""

    kind: str  # "dir", "file", "symlink", "hardlink"
    mode: int = 0o755
    data: bytes | None = None
    source: Path | None = None
    link: str = ""
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, bytes], ...] = ()

    def size(self) -> int:
        if self.kind != "file":
            return 0
        if self.data is not None:
            return len(self.data)
        assert self.source is not None
        return self.source.stat().st_size


def _norm(path: str) -> str:
    p = PurePosixPath("/" + path.lstrip("/"))
    parts = [x for x in p.parts[1:] if x not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{path!r}: '..' in an image path")
    if not parts:
        raise ValueError(f"{path!r}: not a path below /")
    return "/".join(parts)


@dataclass
class Tree:
    """A root filesystem (or one layer of it): normalized path -> :class:`Entry`. Parents that are
    not given are written as 0755 directories."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def dir(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Tree:
        self.entries[_norm(path)] = Entry("dir", mode, uid=uid, gid=gid)
        return self

    def file(self, path: str, data: bytes | str | None = None, *, source: Path | None = None,
             mode: int = 0o644, xattrs: dict[str, bytes] | None = None) -> Tree:
        if (data is None) == (source is None):
            raise ValueError(f"{path}: give the data or a source file, not both or neither")
        if isinstance(data, str):
            data = data.encode()
        self.entries[_norm(path)] = Entry("file", mode, data=data, source=source,
                                          xattrs=tuple(sorted((xattrs or {}).items())))
        return self

    def symlink(self, path: str, target: str) -> Tree:
        self.entries[_norm(path)] = Entry("symlink", 0o777, link=target)
        return self

    def hardlink(self, path: str, target: str) -> Tree:
        self.entries[_norm(path)] = Entry("hardlink", 0o644, link=_norm(target))
        return self

    def remove(self, path: str) -> None:
        """``path`` and everything under it."""
        p = _norm(path)
        for key in [k for k in self.entries if k == p or k.startswith(p + "/")]:
            del self.entries[key]

    def merge(self, other: Tree) -> Tree:
        self.entries.update(other.entries)
        return self

    def add_tree(self, root: Path, prefix: str = "", keep: Any = None) -> Tree:
        """Everything below the directory ``root`` (not following symlinks), at ``prefix``. Files that
        share an inode become hard links to the first of them in path order; ``keep(relpath)``
        may leave paths out (a directory left out takes what is below it along)."""
        seen: dict[tuple[int, int], str] = {}
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(dirnames) + sorted(filenames):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if keep is not None and not keep(rel):
                    if name in dirnames:
                        dirnames.remove(name)
                    continue
                full = Path(dirpath) / name
                st = full.lstat()
                dest = _norm(f"{prefix}/{rel}")
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    self.entries[dest] = Entry("symlink", 0o777, link=os.readlink(full))
                elif stat.S_ISDIR(st.st_mode):
                    self.entries[dest] = Entry("dir", mode)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if st.st_nlink > 1 and key in seen:
                        self.entries[dest] = Entry("hardlink", mode, link=seen[key])
                    else:
                        seen[key] = dest
                        self.entries[dest] = Entry("file", mode, source=full)
                else:
                    raise ValueError(f"{full}: not a file, directory or symlink (mode {st.st_mode:o})")
        self._fix_hardlinks()
        return self

    def _fix_hardlinks(self) -> None:
        """A hard link must come after its target in the tar: sorted order decides which path of a
        group is the file and which are the links."""
        groups: dict[str, list[str]] = {}
        for path, e in self.entries.items():
            if e.kind == "hardlink":
                groups.setdefault(e.link, []).append(path)
        for target, links in groups.items():
            first = min([target, *links], key=lambda p: p.split("/"))
            if first == target:
                continue
            original = self.entries[target]
            self.entries[first] = original
            for p in [target, *links]:
                if p != first:
                    self.entries[p] = Entry("hardlink", original.mode, link=first)

    def paths(self) -> list[str]:
        """Every path the tar holds, parents included, in the tar's order."""
        all_paths = set(self.entries)
        for p in self.entries:
            parts = p.split("/")
            all_paths.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return sorted(all_paths, key=lambda p: p.split("/"))

    def size(self) -> int:
        return sum(e.size() for e in self.entries.values())


def _tarinfo(path: str, e: Entry, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path + ("/" if e.kind == "dir" else ""))
    info.mtime = mtime
    info.uid, info.gid = e.uid, e.gid
    info.uname = info.gname = ""
    info.mode = e.mode & 0o7777
    if e.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif e.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, e.link
    elif e.kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, e.link
    else:
        info.type, info.size = tarfile.REGTYPE, e.size()
    if e.xattrs:
        # tarfile writes PAX values as UTF-8 text; hdrcharset=BINARY has it write the bytes as given.
        info.pax_headers = {"hdrcharset": "BINARY",
                            **{f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape") for k, v in e.xattrs}}
    return info


class _HashingWriter(io.RawIOBase):
    def __init__(self, out: BinaryIO) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        b = bytes(b)
        self.out.write(b)
        self.sha.update(b)
        self.size += len(b)
        return len(b)


@dataclass(frozen=True)
class Blob:
    digest: str  # "sha256:<hex>"
    size: int

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]


def write_layer(tree: Tree, out: BinaryIO, mtime: int | None = None) -> Blob:
    """The layer tar of ``tree`` into ``out``; its digest (= its diff_id: layers are uncompressed)."""
    mtime = source_date_epoch() if mtime is None else mtime
    w = _HashingWriter(out)
    with tarfile.open(fileobj=w, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:  # type: ignore[call-overload]
        for path in tree.paths():
            e = tree.entries.get(path) or Entry("dir", 0o755)
            info = _tarinfo(path, e, mtime)
            if e.kind != "file":
                tar.addfile(info)
            elif e.data is not None:
                tar.addfile(info, io.BytesIO(e.data))
            else:
                assert e.source is not None
                with e.source.open("rb") as f:
                    tar.addfile(info, f)
                    if f.tell() != info.size:
                        raise RuntimeError(f"{e.source} changed size while it was written")
    return Blob(f"sha256:{w.sha.hexdigest()}", w.size)


def image_config(diff_ids: list[str], config: dict[str, Any], history: list[str],
                 created: int | None = None, architecture: str = "amd64") -> bytes:
    """An OCI image config: the container defaults (``Env``, ``Entrypoint``, ``Cmd``, ``User``,
    ``WorkingDir``, ...), one history entry per layer, the layers' diff_ids."""
    if len(history) != len(diff_ids):
        raise ValueError("one history line per layer")
    when = _rfc3339(source_date_epoch() if created is None else created)
    return canonical_json({
        "architecture": architecture, "os": "linux", "created": when,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": when, "created_by": h} for h in history],
    })


def _rfc3339(epoch: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest(config: Blob, layers: list[Blob]) -> bytes:
    return canonical_json({
        "schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config.digest, "size": config.size},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": b.digest, "size": b.size} for b in layers],
    })


def index(manifest_blob: Blob, ref: str, *aliases: str) -> bytes:
    """One entry per name: ``ctr images import`` names an image after each entry's annotation."""
    return canonical_json({
        "schemaVersion": 2, "mediaType": MEDIA_INDEX,
        "manifests": [{"mediaType": MEDIA_MANIFEST, "digest": manifest_blob.digest, "size": manifest_blob.size,
                       "annotations": {ANNOTATION_NAME: r, ANNOTATION_REF: tag_of(r)},
                       "platform": {"architecture": "amd64", "os": "linux"}} for r in (ref, *aliases)],
    })


def docker_manifest(config: Blob, layers: list[Blob], ref: str, *aliases: str) -> bytes:
    return canonical_json([{"Config": f"blobs/sha256/{config.hex}", "RepoTags": [docker_tag(r) for r in (ref, *aliases)],
                            "Layers": [f"blobs/sha256/{b.hex}" for b in layers]}])


def tag_of(ref: str) -> str:
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        raise ValueError(f"{ref!r} has no tag")
    return tag


def docker_tag(ref: str) -> str:
    """Docker's short form: ``docker.io/library/busybox:1.36`` -> ``busybox:1.36``."""
    for prefix in ("docker.io/library/", "docker.io/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def blob_of(data: bytes) -> Blob:
    return Blob(f"sha256:{hashlib.sha256(data).hexdigest()}", len(data))


def write_archive(out: BinaryIO, ref: str, config: bytes, layers: Iterable[tuple[Blob, Path]],
                  mtime: int | None = None, aliases: tuple[str, ...] = ()) -> Blob:
    """The image archive: OCI layout + docker ``manifest.json``. ``layers`` are (blob, layer tar
    file) in order; ``aliases`` are more names for the same image. Returns the manifest's blob (the
    image's digest)."""
    mtime = source_date_epoch() if mtime is None else mtime
    layers = list(layers)
    config_blob = blob_of(config)
    man = manifest(config_blob, [b for b, _ in layers])
    man_blob = blob_of(man)
    members: dict[str, bytes | Path] = {
        "oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
        "index.json": index(man_blob, ref, *aliases),
        "manifest.json": docker_manifest(config_blob, [b for b, _ in layers], ref, *aliases),
        f"blobs/sha256/{config_blob.hex}": config,
        f"blobs/sha256/{man_blob.hex}": man,
    }
    for blob, path in layers:
        members[f"blobs/sha256/{blob.hex}"] = path
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d + "/")
            info.type, info.mode, info.mtime, info.uname, info.gname = tarfile.DIRTYPE, 0o755, mtime, "", ""
            tar.addfile(info)
        for name in sorted(members):
            content = members[name]
            info = tarfile.TarInfo(name)
            info.mode, info.mtime, info.uname, info.gname = 0o644, mtime, "", ""
            if isinstance(content, bytes):
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            else:
                info.size = content.stat().st_size
                with content.open("rb") as f:
                    tar.addfile(info, f)
    return man_blob


def read_archive(path: Path) -> dict[str, Any]:
    """The index, manifest and config of an archive written by :func:`write_archive` (for checks)."""
    with tarfile.open(path) as tar:
        def member(name: str) -> Any:
            f = tar.extractfile(name)
            assert f is not None
            return json.loads(f.read())
        idx = member("index.json")
        man_digest = idx["manifests"][0]["digest"].split(":", 1)[1]
        man = member(f"blobs/sha256/{man_digest}")
        config = member(f"blobs/sha256/{man['config']['digest'].split(':', 1)[1]}")
        return {"index": idx, "manifest": man, "config": config, "docker": member("manifest.json"),
                "names": tar.getnames()}


def layer_members(path: Path) -> Iterator[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        yield from tar.getmembers()
