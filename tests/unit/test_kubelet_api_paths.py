"""The shared node's kubelet API: who may call it, and which host subresource each kubelet request becomes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization

from certs import pki
from certs import tenant as tenantpki
from reconciler.shared.kubeletapi import KubeletApi, Refusal, Tenant, host_request

NS = "vcw-team-shop-abc123"


def query(path: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(path).query)


def test_a_log_request_becomes_the_host_pods_log_with_the_same_options() -> None:
    method, path, ns, pod = host_request("GET", "/containerLogs/default/web-1/httpd?follow=true&tailLines=10"
                                                "&sinceSeconds=60&previous=true&timestamps=true", NS)
    assert (method, ns, pod) == ("GET", "default", "web-1")
    assert urlsplit(path).path == f"/api/v1/namespaces/{NS}/pods/web-1-x-default/log"
    assert query(path) == [("container", "httpd"), ("follow", "true"), ("tailLines", "10"), ("sinceSeconds", "60"),
                           ("previous", "true"), ("timestamps", "true")]


def test_exec_and_attach_speak_the_host_apis_stream_names() -> None:
    _, path, _, _ = host_request("POST", "/exec/apps/web-1/httpd?command=sh&command=-c&command=echo%20hi"
                                         "&input=1&output=1&tty=1", NS)
    assert urlsplit(path).path == f"/api/v1/namespaces/{NS}/pods/web-1-x-apps/exec"
    assert query(path) == [("container", "httpd"), ("command", "sh"), ("command", "-c"), ("command", "echo hi"),
                           ("stdin", "true"), ("stdout", "true"), ("tty", "true")]
    _, path, _, _ = host_request("POST", "/attach/apps/web-1/httpd?output=1&error=1", NS)
    assert urlsplit(path).path.endswith("/pods/web-1-x-apps/attach")
    assert query(path) == [("container", "httpd"), ("stdout", "true"), ("stderr", "true")]


def test_port_forward_names_its_ports_as_the_host_api_does() -> None:
    _, path, ns, pod = host_request("GET", "/portForward/apps/web-1?port=8080&port=9090", NS)
    assert (ns, pod) == ("apps", "web-1")
    assert urlsplit(path).path == f"/api/v1/namespaces/{NS}/pods/web-1-x-apps/portforward"
    assert query(path) == [("ports", "8080"), ("ports", "9090")]


@pytest.mark.parametrize("target", ["/pods", "/stats/summary", "/run/apps/web-1/httpd", "/exec/apps/web-1",
                                    "/configz", "/containerLogs/apps/web-1"])
def test_what_a_shared_node_does_not_serve_is_not_found(target: str) -> None:
    with pytest.raises(Refusal) as refused:
        host_request("GET", target, NS)
    assert refused.value.code == 404


def test_a_caller_is_the_tenant_whose_cluster_ca_signed_its_kubelet_client_certificate(tmp_path: Path) -> None:
    serving = pki.new_leaf(pki.new_ca("serving"), "vc-apiserver", hosts=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    a, b = tenantpki.generate(["127.0.0.1"]), tenantpki.generate(["127.0.0.1"])
    tenants = [Tenant("uid-a", a.cert("ca"), "vcw-a"), Tenant("uid-b", b.cert("ca"), "vcw-b")]
    api = KubeletApi(None, lambda: tenants, "127.0.0.1", 0,  # type: ignore[arg-type]
                     str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))

    def der(tenant: tenantpki.TenantPki, stem: str) -> bytes:
        return tenant.cert(stem).public_bytes(serialization.Encoding.DER)
    assert api._tenant_of(der(a, "apiserver-kubelet-client")).uid == "uid-a"
    assert api._tenant_of(der(b, "apiserver-kubelet-client")).uid == "uid-b"
    for refused in (der(a, "admin"), None):  # another identity of the tenant, or none
        with pytest.raises(Refusal) as e:
            api._tenant_of(refused)
        assert e.value.code in (401, 403)
    stranger = tenantpki.generate(["127.0.0.1"])  # a cluster with no slice here
    with pytest.raises(Refusal) as e:
        api._tenant_of(der(stranger, "apiserver-kubelet-client"))
    assert e.value.code == 403
