"""What the agent remembers across its own restarts: which tenant the kubelet serves, since when.

The state is written before the kubelet's files change and cleared only after the original files are
back and the kubelet restarted, so an agent that crashed in between still knows there is something
to undo.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reconciler.fileio import remove, write_atomic
from reconciler.nodeagent.files import PRIVATE


@dataclass(frozen=True)
class Joined:
    virtual_cluster: str  # namespace/name
    server: str
    node_name: str
    since: str  # RFC 3339
    restarted: bool = False  # the kubelet was restarted onto the tenant's files


class StateFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Joined | None:
        try:
            return Joined(**json.loads(self.path.read_bytes()))
        except FileNotFoundError:
            return None

    def save(self, joined: Joined) -> None:
        write_atomic(self.path, json.dumps(asdict(joined)).encode(), PRIVATE)

    def clear(self) -> None:
        remove(self.path)


def status(joined: Joined | None) -> dict[str, Any]:
    """The body of GET /v1/status (and of join and leave answers)."""
    if joined is None:
        return {"joined": False, "virtualCluster": "", "server": "", "since": "", "kubeletRestarted": False}
    return {"joined": True, "virtualCluster": joined.virtual_cluster, "server": joined.server,
            "since": joined.since, "nodeName": joined.node_name, "kubeletRestarted": joined.restarted}
