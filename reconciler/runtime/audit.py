"""How a tenant's inactivity is read: its kube-apiserver's own audit log, kept to user requests.

``apiserver_request_total`` has no user label, so the apiserver's metrics cannot tell a person's
request from its controller-manager's. Its audit log can: the policy here logs, at ``Metadata``
level (who, verb, URI, code; never a body), every request except those of the tenant's own
machinery, and only once it has been answered (``ResponseComplete``; a watch also at
``ResponseStarted``). So the time of the last event in the log is the time the apiserver last served
a user. Not counted:

* this server (``kubernetes-admin``: readiness checks, bootstrap, node joins, and the playground's
  kwok, which uses the same credential),
* the tenant's controller-manager, scheduler and the apiserver's own loopback client,
* nodes (``system:nodes``), service accounts (``system:serviceaccounts``: the controllers run with
  service-account credentials, and so do workloads' in-cluster clients) and unauthenticated health
  probes.

Everyone holding a credential from the ``kubeconfig`` subresource (group ``kosmos:tenant-admins``)
counts, even a host service account (named ``system:serviceaccount:...``) that fetched one; so does
any other user the tenant's admins create in it. Both runtimes use this policy: the ``process``
runtime writes the log to a file in the tenant's directory, the ``pods`` runtime to the apiserver's
standard output, read through the host's pod log API.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable

from apiserver.machinery.timefmt import parse_rfc3339
from certs.tenant import ADMIN_USER, CONTROLLER_MANAGER_USER, SCHEDULER_USER, TENANT_ADMINS
from reconciler.runtime.base import RuntimeFailure

__all__ = ["MARKER", "POLICY", "audited", "flags", "latest", "policy_file", "unknown"]

# What one line of the log starts with (kube writes each event as one JSON object per line).
MARKER = '{"kind":"Event","apiVersion":"audit.k8s.io/v1"'

POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [TENANT_ADMINS]},
        {"level": "None", "users": [ADMIN_USER, CONTROLLER_MANAGER_USER, SCHEDULER_USER, "system:apiserver",
                                    "system:kube-proxy"]},
        {"level": "None", "userGroups": ["system:nodes", "system:serviceaccounts", "system:unauthenticated"]},
        {"level": "Metadata"},
    ],
}

MAX_SIZE_MB = 5  # the process runtime keeps at most this much log, twice (one backup)


def policy_file() -> bytes:
    return json.dumps(POLICY, indent=2).encode()  # JSON is YAML: kube-apiserver reads either


def flags(policy_path: str, log_path: str) -> list[str]:
    """The kube-apiserver flags: ``log_path`` a file, or ``-`` for standard output."""
    out = [f"--audit-policy-file={policy_path}", f"--audit-log-path={log_path}", "--audit-log-format=json"]
    if log_path != "-":
        out += [f"--audit-log-maxsize={MAX_SIZE_MB}", "--audit-log-maxbackup=1"]
    return out


def audited(command: Iterable[str]) -> bool:
    """Whether an apiserver started with ``command`` writes the audit log (one started before this
    policy existed does not, and its silence must not read as inactivity)."""
    return any(arg.startswith("--audit-log-path=") for arg in command)


def latest(lines: Iterable[str]) -> dt.datetime | None:
    """The ``stageTimestamp`` of the last audit event among ``lines`` (other lines are skipped)."""
    found: dt.datetime | None = None
    for line in lines:
        start = line.find(MARKER)
        if start < 0:
            continue
        try:
            event = json.loads(line[start:])
            stamp = parse_rfc3339(event["stageTimestamp"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a line cut short by rotation or a log limit
        if found is None or stamp > found:
            found = stamp
    return found


def unknown(why: str) -> RuntimeFailure:
    """The runtime cannot tell when the tenant was last used: it is not hibernated for inactivity."""
    return RuntimeFailure("ActivityUnknown", why)
