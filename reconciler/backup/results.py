"""What a snapshot pod (``python -m reconciler.backup``) reports, as it logs it and vc-apiserver reads it
back from the pod's log: one line, the last of its kind, of JSON after a prefix."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from reconciler.backup.snapshots import Snapshot

PREFIX = "result: "  # marks the result among whatever else the pod logs


def line(result: dict[str, Any]) -> str:
    return PREFIX + json.dumps(result, separators=(",", ":"))


def parse(log: str) -> dict[str, Any] | None:
    """The result a snapshot pod logged last, if it got that far."""
    for text in reversed(log.splitlines()):
        if text.startswith(PREFIX):
            try:
                found = json.loads(text[len(PREFIX):])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def encode(snapshots: list[Snapshot]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in snapshots]


def decode(records: list[dict[str, Any]]) -> list[Snapshot]:
    names = {f.name for f in dataclasses.fields(Snapshot)}
    return [Snapshot(**{k: v for k, v in r.items() if k in names}) for r in records]
