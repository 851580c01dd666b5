"""Files other programs read while we write them: every write is a temporary file renamed into place.

A reader (a kubelet, a controller-manager starting up) never sees half a file, and a crash leaves
either the old content or the new one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed it
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def symlink_atomic(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        _fsync_dir(path.parent)


def write_if_changed(path: Path, data: bytes, mode: int) -> bool:
    """``write_atomic`` unless ``path`` already holds ``data``; True if it wrote."""
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_atomic(path, data, mode)
    return True
