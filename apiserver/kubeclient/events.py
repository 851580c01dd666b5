"""core/v1 Events on the host, so ``kubectl describe vc`` tells a VirtualCluster's story.

Without a host (standalone mode) events are only logged. Recording never fails the
caller: an event that cannot be written is a log line, not an error.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.timestamps import now_rfc3339

log = logging.getLogger(__name__)

COMPONENT = "vc-apiserver"


class EventRecorder:
    def __init__(self, host: KubeClient | None) -> None:
        self.host = host
        self.instance = f"{socket.gethostname()}-{os.getpid()}"

    async def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        log.info("event %s/%s %s %s: %s", meta.get("namespace"), meta.get("name"), type_, reason, message)
        if self.host is None:
            return
        now = now_rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": VIRTUALCLUSTERS.group_version, "kind": VIRTUALCLUSTERS.kind,
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid", ""),
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason, "message": message[:1024], "type": type_,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance,
        }
        try:
            await self.host.create(f"/api/v1/namespaces/{meta['namespace']}/events", event)
        except (HostError, HostUnavailable) as e:
            log.warning("could not record event %s for %s/%s: %s", reason, meta["namespace"], meta["name"], e)
