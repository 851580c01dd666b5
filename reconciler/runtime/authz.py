"""How a tenant apiserver authorizes: Node, then vc-apiserver's credential webhook, then RBAC, in its
structured authorization configuration (``--authorization-config``), written once for both runtimes.

The webhook (:mod:`apiserver.endpoints.tenantauthz`) is asked only about requests made with a
credential the ``kubeconfig`` subresource issued (a CEL match condition on the ``kosmos:credential:``
group), and only ever denies or has no opinion. Its answers are cached ``UNAUTHORIZED_TTL`` seconds:
a revoked credential is refused at most that long after its object is deleted. When vc-apiserver does
not answer, the tenant fails open to RBAC (``failurePolicy: NoOpinion``): credentials keep working
through an outage of the server, up to their own expiry. A refused connection is not retried (kube's
webhook client retries only resets, 429, 5xx and timeouts), so an outage costs a request nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from certs import pki
from certs.tenant import CREDENTIAL_GROUP_PREFIX, TenantPki

__all__ = ["UNAUTHORIZED_TTL", "TenantAuthorizationWebhook", "authorization_config"]

UNAUTHORIZED_TTL = "5s"  # how long an answer is cached: the bound of the revocation delay
TIMEOUT = "3s"
WEBHOOK_PATH = "/tenant-authorization/namespaces/{namespace}/virtualclusters/{name}"


def authorization_config(webhook_kubeconfig: str | None) -> bytes:
    """The AuthorizationConfiguration; without ``webhook_kubeconfig`` (no address the tenant can reach
    the server at), Node and RBAC only."""
    authorizers: list[dict[str, object]] = [{"type": "Node", "name": "node"}]
    if webhook_kubeconfig:
        authorizers.append({"type": "Webhook", "name": "kosmos-credentials", "webhook": {
            "timeout": TIMEOUT, "authorizedTTL": "5m", "unauthorizedTTL": UNAUTHORIZED_TTL,
            "subjectAccessReviewVersion": "v1", "matchConditionSubjectAccessReviewVersion": "v1",
            "failurePolicy": "NoOpinion",
            "connectionInfo": {"type": "KubeConfigFile", "kubeConfigFile": webhook_kubeconfig},
            "matchConditions": [
                {"expression": f"request.groups.exists(g, g.startsWith('{CREDENTIAL_GROUP_PREFIX}'))"}]}})
    authorizers.append({"type": "RBAC", "name": "rbac"})
    config = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthorizationConfiguration",
              "authorizers": authorizers}
    return json.dumps(config, indent=2).encode()  # JSON is YAML: kube-apiserver reads either


@dataclass(frozen=True)
class TenantAuthorizationWebhook:
    """Where tenant apiservers reach vc-apiserver (``https://host:port``), and the PEM bundle that
    verifies its serving certificate (the certificate itself will do: Go trusts a root that is the leaf)."""

    url: str
    ca: bytes
    server_name: str = ""  # the TLS name to verify, when the URL's host is not in the certificate

    def kubeconfig(self, namespace: str, name: str, tenant: TenantPki) -> bytes:
        """The webhook's kubeconfig for one tenant: the server at the tenant's path, its token."""
        server = self.url.rstrip("/") + WEBHOOK_PATH.format(namespace=namespace, name=name)
        config = pki.kubeconfig(server, self.ca, "tenant-apiserver", token=tenant.webhook_token(),
                                cluster="vc-apiserver")
        if self.server_name:
            config["clusters"][0]["cluster"]["tls-server-name"] = self.server_name
        return json.dumps(config).encode()
