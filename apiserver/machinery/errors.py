"""Kubernetes ``Status`` errors: the one place failure bodies are shaped.

Every failure a client can cause is raised as :class:`ApiError` and rendered by the
error middleware exactly as a Go apiserver would (``kind: Status``, reason, code,
details with causes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One entry of ``details.causes``: what is wrong with which field."""

    type: str
    message: str
    field: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"reason": self.type, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


# Cause types (metav1.CauseType values).
FIELD_VALUE_INVALID = "FieldValueInvalid"
FIELD_VALUE_REQUIRED = "FieldValueRequired"
FIELD_VALUE_NOT_SUPPORTED = "FieldValueNotSupported"
FIELD_VALUE_DUPLICATE = "FieldValueDuplicate"
FIELD_VALUE_FORBIDDEN = "FieldValueForbidden"
FIELD_VALUE_TOO_LONG = "FieldValueTooLong"
FIELD_VALUE_TYPE_INVALID = "FieldValueTypeInvalid"
UNEXPECTED_SERVER_RESPONSE = "UnexpectedServerResponse"


@dataclass
class ApiError(Exception):
    """A failure answered with a Status body."""

    code: int
    reason: str
    message: str
    name: str = ""
    group: str = ""
    kind: str = ""
    causes: list[Cause] = field(default_factory=list)
    retry_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # Warning headers that go with the failure

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:  # StatusReasonUnknown is omitted (a plain error kube turns into a Status)
            del body["reason"]
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
                    name=name, group=group, kind=resource)


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(resource, group)} "{name}" already exists',
                    name=name, group=group, kind=resource)


def conflict(resource: str, group: str, name: str, detail: str) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {detail}',
                    name=name, group=group, kind=resource)


CONFLICT_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid, with kube's message: ``Kind.group "name" is invalid: f: msg, ...``."""
    parts = list(dict.fromkeys(f"{c.field}: {c.message}" if c.field else c.message for c in causes))
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"  # kube's aggregate: each once
    return ApiError(422, "Invalid", f'{_qualified(kind, group)} "{name}" is invalid: {summary}',
                    name=name, group=group, kind=kind, causes=causes)


def bad_request(message: str, causes: list[Cause] | None = None) -> ApiError:
    return ApiError(400, "BadRequest", message, causes=causes or [])


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f'the body of the request was in an unknown format - accepted media types include: '
                    f'{", ".join(accepted)}')


def not_acceptable(accepted: list[str]) -> ApiError:
    return ApiError(406, "NotAcceptable",
                    f"only the following media types are accepted: {', '.join(accepted)}")


def request_entity_too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def service_unavailable(message: str, retry_after: int = 1) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message, retry_after=retry_after,
                    headers={"Retry-After": str(retry_after)})


def too_large_resource_version(rv: int, current: int | None = None) -> ApiError:
    """kube's 504 for a resourceVersion not reached yet; clients retry it."""
    now = f", current: {current}" if current is not None else ""
    return ApiError(504, "Timeout", f"Timeout: Too large resource version: {rv}{now}",
                    causes=[Cause("ResourceVersionTooLarge", "Too large resource version")], retry_after=1)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def too_many_requests(retry_after: int = 1) -> ApiError:
    return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                    retry_after=retry_after, headers={"Retry-After": str(retry_after)})


def method_not_supported(resource: str, group: str, verb: str) -> ApiError:
    """kube's 405 for a verb a resource (or subresource) does not serve."""
    return ApiError(405, "MethodNotAllowed",
                    f'{verb} is not supported on resources of kind "{_qualified(resource, group)}"',
                    group=group, kind=resource)


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")
