"""How a VirtualCluster asks for a rotation of its client CA or service-account key: annotations whose
value is the time of the request (RFC 3339), as ``kosmos.io/snapshot-requested`` asks for a snapshot.

``...-rotation-start`` starts one (any value the current rotation was not started by);
``...-rotation-complete`` completes the one a start of an earlier time began. The server never clears
them; ``kubectl vc rotate`` sets them. What the reconciler does with them: :mod:`certs.rotation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apiserver.machinery.errors import FIELD_VALUE_FORBIDDEN, FIELD_VALUE_INVALID, Cause
from apiserver.machinery.timefmt import now_rfc3339, time_of

__all__ = ["ANNOTATIONS", "NAMES", "request_errors"]

# kind (its field in status.credentials.rotation, and its name in certs.rotation) → (start, complete)
ANNOTATIONS = {
    "clientCA": ("kosmos.io/client-ca-rotation-start", "kosmos.io/client-ca-rotation-complete"),
    "serviceAccountKey": ("kosmos.io/service-account-key-rotation-start",
                          "kosmos.io/service-account-key-rotation-complete"),
}
NAMES = {"clientCA": "client CA", "serviceAccountKey": "service-account key"}


def request_errors(obj: Mapping[str, Any]) -> list[Cause]:
    """A rotation request that is not a time, or made of an imported cluster (which has no CA or key of
    ours to rotate): refused at admission, naming the annotation."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec")
    annotations = meta.get("annotations") or {}
    imported = isinstance(spec, dict) and spec.get("import") is not None
    out = []
    for keys in ANNOTATIONS.values():
        for key in keys:
            value = annotations.get(key) if isinstance(annotations, dict) else None
            if value is None:
                continue
            field = f"metadata.annotations[{key}]"
            if imported:
                out.append(Cause(FIELD_VALUE_FORBIDDEN, "Forbidden: an imported cluster's credentials are its own: "
                                 "there is no CA or key of this server's to rotate", field))
            elif time_of(value) is None:
                out.append(Cause(FIELD_VALUE_INVALID, f"Invalid value: {value!r}: must be the time of the request "
                                 f"in RFC 3339, for example {now_rfc3339()}", field))
    return out
