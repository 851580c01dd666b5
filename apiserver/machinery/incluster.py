"""Where a pod finds its own cluster's API server, and what it proves itself with (client-go's
``rest.InClusterConfig``): the ``kubernetes`` service's address from the environment the kubelet
sets, the service account's token and the cluster's CA from their mount."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CA_FILE", "SERVICE_ACCOUNT_DIR", "TOKEN_FILE", "running_in_cluster", "server_url"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE = SERVICE_ACCOUNT_DIR / "token"  # a bound token: the kubelet replaces the file as it rotates it
CA_FILE = SERVICE_ACCOUNT_DIR / "ca.crt"


def server_url() -> str:
    """``https://host:port`` of the API server (an IPv6 host in brackets); KeyError outside a pod."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


def running_in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and TOKEN_FILE.exists()
