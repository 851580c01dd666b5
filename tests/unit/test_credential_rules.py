"""The rules of issued credentials that need no server: the certificate group that names one, the
tenant apiserver's authorization configuration and webhook kubeconfig, and the resource's strategy."""

from __future__ import annotations

import base64
import json

import pytest

from apiserver.apis.credential import CLUSTER_LABEL, OWNER_LABEL, new_credential, owner_label_value
from apiserver.endpoints.tenantauthz import webhook_path
from apiserver.registry.credential import CredentialStrategy
from certs import tenant as tenantpki
from certs.tenant import credential_group, credential_of
from reconciler.runtime.authz import TenantAuthorizationWebhook, authorization_config


@pytest.fixture(scope="module")
def tenant() -> tenantpki.TenantPki:
    return tenantpki.generate(["127.0.0.1"])


def test_the_credential_group_names_the_credential_and_no_other_group_does() -> None:
    assert credential_of(["system:authenticated", credential_group("dev-x7k2p"), "kosmos:tenant-admins"]) == \
        "dev-x7k2p"
    assert credential_of(["kosmos:tenant-admins", "system:masters"]) is None


def test_the_tenant_asks_the_webhook_only_about_issued_credentials_and_falls_back_to_rbac() -> None:
    config = json.loads(authorization_config("/pki/authorization-webhook.kubeconfig"))
    assert config["apiVersion"] == "apiserver.config.k8s.io/v1"
    assert [a["type"] for a in config["authorizers"]] == ["Node", "Webhook", "RBAC"]
    webhook = config["authorizers"][1]["webhook"]
    assert webhook["failurePolicy"] == "NoOpinion"  # an outage of vc-apiserver locks nobody out
    assert webhook["unauthorizedTTL"] == "5s"  # the bound of the revocation delay
    assert webhook["connectionInfo"] == {"type": "KubeConfigFile",
                                         "kubeConfigFile": "/pki/authorization-webhook.kubeconfig"}
    assert webhook["matchConditions"] == [
        {"expression": "request.groups.exists(g, g.startsWith('kosmos:credential:'))"}]


def test_without_a_reachable_server_the_tenant_authorizes_with_node_and_rbac_alone() -> None:
    config = json.loads(authorization_config(None))
    assert [a["type"] for a in config["authorizers"]] == ["Node", "RBAC"]


def test_the_webhook_kubeconfig_posts_to_the_tenants_path_with_a_token_of_its_ca(
        tenant: tenantpki.TenantPki) -> None:
    hook = TenantAuthorizationWebhook("https://vc-apiserver.kosmos-system.svc:443/", b"PEM", server_name="vc")
    config = json.loads(hook.kubeconfig("team-a", "dev", tenant))
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://vc-apiserver.kosmos-system.svc:443" + webhook_path("team-a", "dev")
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"PEM"
    assert cluster["tls-server-name"] == "vc"
    assert config["users"][0]["user"] == {"token": tenant.webhook_token()}


def test_the_webhook_token_is_the_same_for_a_renewed_pki_and_differs_between_tenants(
        tenant: tenantpki.TenantPki) -> None:
    renewed = tenantpki.generate(["127.0.0.1"], previous=tenant)
    other = tenantpki.generate(["127.0.0.1"])
    assert renewed.webhook_token() == tenant.webhook_token() != other.webhook_token()


def test_an_issued_credential_is_labelled_with_its_cluster_and_its_holder() -> None:
    obj = new_credential("team-a", "dev", "system:serviceaccount:ci:deployer", "u1", ["system:authenticated"], {},
                         "2026-12-01T00:00:00Z")
    labels = obj["metadata"]["labels"]
    assert labels[CLUSTER_LABEL] == "dev"
    assert labels[OWNER_LABEL] == owner_label_value("system:serviceaccount:ci:deployer")
    assert len(labels[OWNER_LABEL]) <= 63 and labels[OWNER_LABEL].isalnum()
    assert obj["metadata"]["generateName"] == "dev-"
    assert CredentialStrategy().validate(obj) == []


def test_the_spec_of_an_issued_credential_never_changes_but_its_last_use_does() -> None:
    strategy = CredentialStrategy()
    old = new_credential("team-a", "dev", "alice", "", [], {}, "2026-12-01T00:00:00Z")
    forged = json.loads(json.dumps(old))
    forged["spec"]["user"] = "mallory"
    assert [c.field for c in strategy.validate_update(forged, old)] == ["spec"]
    used = json.loads(json.dumps(old))
    used["status"] = {"lastUsedTime": "2026-11-28T12:00:00Z"}
    assert strategy.validate_update(used, old) == []
    used["status"] = {"lastUsedTime": 5}
    assert [c.field for c in strategy.validate_update(used, old)] == ["status.lastUsedTime"]
