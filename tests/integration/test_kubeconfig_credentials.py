"""Credentials from a kubeconfig reach a real kube-apiserver (static tokens from --token-auth-file,
client certificates from its CA): exec plugins, their expiry and a 401, and a rotated token file.
Who the apiserver took the caller for is its own answer, a SelfSubjectReview."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from apiserver.kubeclient.client import HostError, KubeClient
from certs import pki
from hack.harness import HostCluster, HostPki, free_port
from tests.support.exec_plugin import V1, V1BETA1, Plugin, exec_credential, write_kubeconfig

USERS = {"exec-token-1": "exec-user-1", "exec-token-2": "exec-user-2",
         "file-token-a": "file-user-a", "file-token-b": "file-user-b"}


@dataclass
class TokenHost(HostCluster):
    """etcd and a kube-apiserver that also knows the static tokens of ``token_file``."""

    token_file: Path = Path("/nonexistent")

    def apiserver_args(self) -> list[str]:
        return [*super().apiserver_args(), f"--token-auth-file={self.token_file}"]

    def kubeconfig(self, path: Path, user: dict[str, Any]) -> Path:
        return write_kubeconfig(path, self.url, user, ca=self.pki.path("ca.crt").read_bytes())


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenHost]:
    root = tmp_path_factory.mktemp("token-host")
    tokens = root / "tokens.csv"
    tokens.write_text("".join(f"{token},{user},{user}\n" for token, user in USERS.items()))
    server = TokenHost(root, free_port(), free_port(), free_port(), token_file=tokens)
    HostPki.ensure(root / "pki")
    try:
        server.procs["etcd"] = server.etcd().start().proc  # type: ignore[assignment]
        server.start_apiserver()
        yield server
    finally:
        server.stop()


async def who_am_i(client: KubeClient) -> str:
    review = await client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                 {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return str(review["status"]["userInfo"]["username"])


def exec_user(plugin: Plugin, api_version: str = V1) -> dict[str, Any]:
    return {"exec": {"apiVersion": api_version, "command": str(plugin.program), "interactiveMode": "IfAvailable"}}


async def test_an_exec_plugins_token_reaches_the_host_and_is_used_until_it_expires(host: TokenHost,
                                                                                   tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("exec-token-1", expires_in=3), run=1)
    plugin.prints(exec_credential("exec-token-2", expires_in=3600), run=2)
    client = KubeClient.from_kubeconfig(host.kubeconfig(tmp_path / "kubeconfig", exec_user(plugin)))
    try:
        assert [await who_am_i(client), await who_am_i(client)] == ["exec-user-1", "exec-user-1"]
        assert plugin.runs == 1  # cached until it expires
        await asyncio.sleep(3.2)  # past expirationTimestamp (whole seconds: 2 to 3 s from the first run)
        assert await who_am_i(client) == "exec-user-2"
        assert plugin.runs == 2
        assert plugin.given(2)["exec_info"]["spec"] == {"interactive": False}
    finally:
        await client.close()


async def test_a_401_runs_the_plugin_again_once_and_the_request_is_tried_again(host: TokenHost,
                                                                                tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("revoked-token"), run=1)  # no expiry, yet the host refuses it
    plugin.prints(exec_credential("exec-token-2"), run=2)
    client = KubeClient.from_kubeconfig(host.kubeconfig(tmp_path / "kubeconfig", exec_user(plugin)))
    try:
        assert await who_am_i(client) == "exec-user-2"
        assert plugin.runs == 2
    finally:
        await client.close()

    refused = Plugin.create(tmp_path / "refused")
    refused.prints(exec_credential("revoked-token"))
    client = KubeClient.from_kubeconfig(host.kubeconfig(tmp_path / "refused.kubeconfig", exec_user(refused)))
    try:
        with pytest.raises(HostError) as e:
            await who_am_i(client)
        assert e.value.code == 401
        assert refused.runs == 2  # the first credential and one more, not a loop
    finally:
        await client.close()


async def test_a_client_certificate_from_an_exec_plugin_reaches_the_host(host: TokenHost, tmp_path: Path) -> None:
    ca = pki.KeyPair.read(host.pki.dir, "ca")
    leaf = pki.new_leaf(ca, "exec-cert-user", days=1)
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential(cert=leaf.cert_pem, key=leaf.key_pem, api_version=V1BETA1))
    client = KubeClient.from_kubeconfig(host.kubeconfig(tmp_path / "kubeconfig", exec_user(plugin, V1BETA1)))
    try:
        assert await who_am_i(client) == "exec-cert-user"
    finally:
        await client.close()


async def test_a_token_file_is_read_again_when_it_is_rotated(host: TokenHost, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("file-token-a\n")
    client = KubeClient.from_kubeconfig(host.kubeconfig(tmp_path / "kubeconfig", {"tokenFile": str(token)}))
    try:
        assert await who_am_i(client) == "file-user-a"
        rotated = tmp_path / "token.new"  # replaced whole, as kubelet swaps a projected volume's files
        rotated.write_text("file-token-b\n")
        os.replace(rotated, token)
        assert await who_am_i(client) == "file-user-b"
    finally:
        await client.close()
