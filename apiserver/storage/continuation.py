"""The ``continue`` token of a paged list: the revision the first page was read at and the key
after which the next page starts, relative to the list's prefix (kube's ``storage.EncodeContinue``)."""

from __future__ import annotations

import base64
import json

import orjson

from apiserver.machinery import gojson
from apiserver.machinery.golang import MAX_INT64
from apiserver.storage.interface import StorageError
from apiserver.storage.keys import KeyLayout

__all__ = ["continue_after", "decode_continue", "encode_continue", "start_after"]

CONTINUE_VERSION = "meta.k8s.io/v1"


def encode_continue(rv: int, start: str) -> str:
    token = orjson.dumps({"v": CONTINUE_VERSION, "rv": rv, "start": start})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """(revision, start key relative to the list's prefix) of a token, refused in kube's words
    (``storage.DecodeContinue``: Go's base64 and JSON errors included). A negative revision asks for
    the latest one (returned as 0)."""
    def invalid(detail: str) -> StorageError:
        return StorageError(StorageError.INVALID, f"continue key is not valid{detail}")
    try:
        data = gojson.base64_raw_url_decode(token)
    except gojson.GoBase64Error as e:
        raise invalid(f": {e}") from None
    problem = gojson.syntax_error(data)
    if problem is not None:
        raise invalid(f": {problem}")
    document = json.loads(data)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise invalid(": " + gojson.type_error(document, "storage.continueToken"))
    version, rv, start = document.get("v"), document.get("rv"), document.get("start")
    for field, value, go_type in (("v", version, "string"), ("rv", rv, "int64"), ("start", start, "string")):
        if value is None:
            continue
        if go_type == "int64":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise invalid(": " + gojson.type_error(value, go_type, f"continueToken.{field}"))
            if isinstance(value, float) or not -MAX_INT64 - 1 <= value <= MAX_INT64:
                raise invalid(f": json: cannot unmarshal number {value} into Go struct field continueToken.{field} "
                              f"of type int64")
        elif not isinstance(value, str):
            raise invalid(": " + gojson.type_error(value, go_type, f"continueToken.{field}"))
    if version != CONTINUE_VERSION:
        raise invalid(f": server does not recognize this encoded version {version or ''}")
    if not rv:
        raise invalid(f": incorrect encoded start resourceVersion (version {CONTINUE_VERSION})")
    if not start:
        raise invalid(f": encoded start key empty (version {CONTINUE_VERSION})")
    key = start if start.startswith("/") else "/" + start
    if _go_path_clean(key) != key:
        raise invalid(f": {start}")
    return max(int(rv), 0), key[1:]


def _go_path_clean(path: str) -> str:
    """Go's ``path.Clean`` of a rooted path."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def continue_after(layout: KeyLayout, namespace: str | None, rv: int, last_key: str) -> str:
    """The token for the page after ``last_key`` of a list of ``namespace`` read at ``rv``."""
    prefix = layout.namespace_prefix(namespace)
    return encode_continue(rv, last_key[len(prefix):] + "\0")


def start_after(layout: KeyLayout, namespace: str | None, start: str) -> str:
    """The full key after which the next page starts, from a decoded token's start key."""
    return layout.namespace_prefix(namespace) + start.rstrip("\0")
