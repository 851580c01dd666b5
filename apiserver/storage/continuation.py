"""The ``continue`` token of a paged list: the revision the first page was read at and the key
after which the next page starts, relative to the list's prefix (kube's ``storage.EncodeContinue``)."""

from __future__ import annotations

import base64
import binascii
import posixpath

import orjson

from apiserver.machinery.golang import MAX_INT64
from apiserver.storage.interface import StorageError
from apiserver.storage.keys import KeyLayout

__all__ = ["continue_after", "decode_continue", "encode_continue"]

CONTINUE_VERSION = "meta.k8s.io/v1"


def encode_continue(rv: int, start: str) -> str:
    token = orjson.dumps({"v": CONTINUE_VERSION, "rv": rv, "start": start})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """(revision, start key relative to the list's prefix); INVALID for anything forged."""
    try:
        padded = token + "=" * (-len(token) % 4)
        data = orjson.loads(base64.urlsafe_b64decode(padded))
        if not isinstance(data, dict) or data.get("v") != CONTINUE_VERSION:
            raise ValueError("unsupported version")
        rv, start = data["rv"], data["start"]
        if type(rv) is not int or not isinstance(start, str):
            raise ValueError("malformed")
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise StorageError(StorageError.INVALID,
                           "continue key is not valid: incorrect encoded start resourceVersion") from None
    key = start.rstrip("\0")
    if not 0 < rv <= MAX_INT64 or not key or key.startswith("/") or posixpath.normpath(key) != key \
            or ".." in key.split("/"):
        raise StorageError(StorageError.INVALID, f"continue key is not valid: {start!r}")
    return rv, start


def continue_after(layout: KeyLayout, namespace: str | None, rv: int, last_key: str) -> str:
    """The token for the page after ``last_key`` of a list of ``namespace`` read at ``rv``."""
    prefix = layout.namespace_prefix(namespace)
    return encode_continue(rv, last_key[len(prefix):] + "\0")


def start_after(layout: KeyLayout, namespace: str | None, token: str) -> tuple[int, str]:
    """(revision, full key after which the next page starts) of a token."""
    rv, start = decode_continue(token)
    return rv, layout.namespace_prefix(namespace) + start.rstrip("\0")
