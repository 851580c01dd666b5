"""Request metrics carry kube-apiserver's labels, so its dashboards and SLO rules read them unchanged."""

from __future__ import annotations

import pytest

from apiserver.auth.authn import Attributes
from apiserver.server.metrics import Metrics

GROUP, VERSION = "kosmos.io", "v1alpha1"


def resource(verb: str, namespace: str = "", name: str = "", subresource: str = "") -> Attributes:
    return Attributes(verb=verb, path="/apis/...", resource_request=True, namespace=namespace, group=GROUP,
                      version=VERSION, resource="virtualclusters", subresource=subresource, name=name)


def served(method: str, attrs: Attributes, code: int = 200) -> str:
    metrics = Metrics()
    metrics.request_served(method, attrs, code, 0.01)
    text = metrics.exposition()[0].decode()
    return next(line for line in text.splitlines() if line.startswith("apiserver_request_total{"))


@pytest.mark.parametrize(("method", "attrs", "verb", "scope"), [
    ("POST", resource("create", "ns"), "POST", "resource"),
    ("PUT", resource("update", "ns", "a"), "PUT", "resource"),
    ("PATCH", resource("patch", "ns", "a"), "PATCH", "resource"),
    ("DELETE", resource("delete", "ns", "a"), "DELETE", "resource"),
    ("DELETE", resource("deletecollection", "ns"), "DELETE", "namespace"),
    ("GET", resource("get", "ns", "a"), "GET", "resource"),
    ("HEAD", resource("get", "ns", "a"), "GET", "resource"),
    ("GET", resource("list", "ns"), "LIST", "namespace"),
    ("GET", resource("list"), "LIST", "cluster"),
    ("GET", resource("watch", "ns"), "WATCH", "namespace"),
    ("GET", resource("watch"), "WATCH", "cluster"),
    ("OPTIONS", resource("options", "ns", "a"), "other", "resource"),
])
def test_the_verb_is_the_http_method_with_lists_and_watches_told_apart(method: str, attrs: Attributes, verb: str,
                                                                       scope: str) -> None:
    line = served(method, attrs)
    assert f'verb="{verb}"' in line and f'scope="{scope}"' in line
    assert f'group="{GROUP}"' in line and f'version="{VERSION}"' in line and 'resource="virtualclusters"' in line


def test_a_subresource_is_its_own_label() -> None:
    assert served("PUT", resource("update", "ns", "a", "status")) == (
        'apiserver_request_total{code="200",group="kosmos.io",resource="virtualclusters",scope="resource",'
        'subresource="status",verb="PUT",version="v1alpha1"} 1.0')


def test_a_non_resource_request_has_no_resource_and_no_scope() -> None:
    assert served("GET", Attributes(verb="get", path="/version"), 200) == (
        'apiserver_request_total{code="200",group="",resource="",scope="",subresource="",verb="GET",version=""} 1.0')
