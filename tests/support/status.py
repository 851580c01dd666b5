"""The contract every answer of the server keeps, whatever a client sent: never a 5xx, and every
error body a well-formed ``Status`` (``kind: Status``, ``apiVersion: v1``, ``status: Failure``,
``code`` equal to the HTTP status, a ``reason`` and a ``message``).

The one 5xx a client can provoke on purpose is kube's own: 504 ``Timeout`` with the cause
``ResourceVersionTooLarge`` for a resourceVersion the server has not reached yet (client-go's
reflector relies on exactly that answer); it is accepted only where the request named such a
resourceVersion.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["INT64", "assert_status_body", "check_answer", "check_watch_stream", "ints_fit_int64",
           "too_large_resource_version"]

INT64 = 2**63


def assert_status_body(code: int, content_type: str, body: bytes, what: str) -> dict[str, Any]:
    """A well-formed Status: kind, apiVersion v1, status Failure, code == HTTP status, reason, message."""
    assert content_type.split(";")[0].strip() == "application/json", \
        f"{what}: a {code} answered with {content_type!r}: {body[:300]!r}"
    doc = json.loads(body)
    assert isinstance(doc, dict), f"{what}: {body[:300]!r}"
    assert doc.get("kind") == "Status" and doc.get("apiVersion") == "v1", f"{what}: not a Status: {doc}"
    assert doc.get("status") == "Failure", f"{what}: {doc}"
    assert doc.get("code") == code, f"{what}: code {doc.get('code')} in a {code} answer"
    assert isinstance(doc.get("reason"), str) and doc["reason"], f"{what}: no reason: {doc}"
    assert isinstance(doc.get("message"), str) and doc["message"], f"{what}: no message: {doc}"
    details = doc.get("details", {})
    assert isinstance(details, dict), f"{what}: {doc}"
    assert all(isinstance(details.get(k, ""), str) for k in ("name", "group", "kind", "uid")), f"{what}: {doc}"
    for cause in details.get("causes", []):
        assert isinstance(cause, dict) and all(isinstance(v, str) for v in cause.values()), f"{what}: {doc}"
    return doc


def too_large_resource_version(doc: dict[str, Any]) -> bool:
    causes = (doc.get("details") or {}).get("causes") or []
    return doc["code"] == 504 and doc["reason"] == "Timeout" and \
        any(c.get("reason") == "ResourceVersionTooLarge" for c in causes)


def check_answer(code: int, content_type: str, body: bytes, what: str, *,
                 future_rv: bool = False) -> dict[str, Any] | None:
    """Any answer: below 400 anything goes here; an error is a Status, and never a 5xx.

    ``future_rv``: the request named a resourceVersion, so kube's 504 ResourceVersionTooLarge
    is the right answer if the server has not reached it. An apply configuration that does not
    type-check is answered 500 "failed to create typed patch object", as kube-apiserver answers
    it (kubernetes#122480): the one 5xx kept on purpose.
    """
    if code < 400:
        return None
    doc = assert_status_body(code, content_type, body, what)
    if code == 500 and str(doc.get("message", "")).startswith("failed to create typed patch object"):
        return doc
    if code >= 500:
        assert future_rv and too_large_resource_version(doc), f"{what}: server error {code}: {doc}"
    return doc


def check_watch_stream(body: bytes, what: str) -> None:
    """A watch that ended: JSON lines of events; an ERROR event carries a Status that is no 5xx."""
    for line in body.splitlines():
        event = json.loads(line)
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"), f"{what}: {event}"
        if event["type"] == "ERROR":
            status = event["object"]
            assert status.get("kind") == "Status" and status.get("status") == "Failure", f"{what}: {status}"
            assert isinstance(status.get("code"), int) and status["code"] < 500, f"{what}: {status}"


def ints_fit_int64(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -INT64 <= value < INT64
    if isinstance(value, dict):
        return all(ints_fit_int64(v) for v in value.values())
    if isinstance(value, list):
        return all(ints_fit_int64(v) for v in value)
    return True
