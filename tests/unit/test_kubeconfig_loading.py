"""kubeconfig loading: what a user entry may ask for, what is refused (naming the entry), and how an
exec credential plugin is run and what it must print. Runs real plugin programs; no server needed,
since a credential is settled before any connection is made."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from apiserver.kubeclient.client import HostUnavailable, KubeClient, load_kubeconfig
from certs import pki
from hack.harness import free_port
from tests.support.exec_plugin import V1, V1BETA1, Plugin, exec_credential, write_kubeconfig

NOWHERE = f"https://127.0.0.1:{free_port()}"  # nothing listens: a request that were sent would fail to connect


def config(tmp_path: Path, user: dict[str, Any], **kwargs: Any) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", NOWHERE, user, **kwargs)


def exec_user(plugin: Plugin, **extra: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": V1, "command": str(plugin.program), "interactiveMode": "Never", **extra}}


async def credential(path: Path) -> Any:
    """The credential the next request would carry."""
    client = KubeClient.from_kubeconfig(path)
    try:
        return await client.credentials.current()
    finally:
        await client.close()


# -- refused when loaded, naming the user entry ---------------------------------------------

@pytest.mark.parametrize(("user", "why"), [
    ({"auth-provider": {"name": "gcp", "config": {"access-token": "x"}}},
     "legacy auth-provider 'gcp' is not supported.*exec credential plugin"),
    ({"auth-provider": {"name": "azure"}}, "legacy auth-provider 'azure' is not supported"),
    ({"username": "admin", "password": "secret"}, "basic authentication .username/password. is not supported"),
    ({"token": "t", "as": "someone-else"}, r"impersonation \(as\) is not supported"),
    ({"client-certificate-data": base64.b64encode(b"cert").decode()}, "client-key-data or client-key must be"),
    ({"client-key": "key.pem"}, "client-certificate-data or client-certificate must be"),
    ({"token": ""}, "has no credential this client can use .it sets token, all empty or unknown"),
    ({"tokenfile": "/var/run/token"}, "has no credential this client can use .it sets tokenfile"),
    ({"tokenFile": "missing-token"}, "cannot use tokenFile .*missing-token"),
    ({"exec": {"apiVersion": V1, "command": "aws"}}, "interactiveMode must be specified"),
    ({"exec": {"apiVersion": V1, "command": "kubelogin", "interactiveMode": "Always"}}, "needs a terminal"),
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x", "interactiveMode": "Never"}},
     "apiVersion 'client.authentication.k8s.io/v1alpha1' is not supported"),
    ({"exec": {"apiVersion": V1, "interactiveMode": "Never"}}, "command must be specified"),
    ({"exec": {"apiVersion": V1, "command": "x", "interactiveMode": "Never", "env": [{"value": "v"}]}},
     "env variable name must be specified"),
])
def test_what_cannot_be_used_is_refused_when_loaded_naming_the_user_entry(tmp_path: Path, user: dict[str, Any],
                                                                         why: str) -> None:
    path = config(tmp_path, user, user_name="the-user")
    with pytest.raises(ValueError, match=f"kubeconfig {path}: user 'the-user'.*{why}"):
        load_kubeconfig(path)


def test_a_context_naming_a_user_that_is_not_there_is_refused(tmp_path: Path) -> None:
    path = config(tmp_path, {"token": "t"}, user_name="present")
    text = path.read_text().replace("user: present", "user: absent")
    path.write_text(text)
    with pytest.raises(ValueError, match="user 'absent' of context 'ctx' not found"):
        load_kubeconfig(path)


async def test_an_empty_user_entry_is_anonymous_as_with_kubectl(tmp_path: Path) -> None:
    assert (await credential(config(tmp_path, {}))).token == ""


async def test_a_token_file_wins_over_a_token_and_is_found_beside_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-the-file\n")
    assert (await credential(config(tmp_path, {"token": "inline", "tokenFile": "token"}))).token == "from-the-file"


async def test_a_token_or_client_certificate_wins_over_the_exec_plugin(tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("from-the-plugin"))
    assert (await credential(config(tmp_path, {"token": "inline", **exec_user(plugin)}))).token == "inline"
    assert plugin.runs == 0


# -- the exec plugin: how it runs, what it must print --------------------------------------------

async def test_the_plugin_gets_its_args_env_and_an_exec_credential_without_a_terminal(tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("t0ken", api_version=V1BETA1))
    ca = pki.new_ca("test-ca").cert_pem
    path = config(tmp_path, {"exec": {
        "apiVersion": V1BETA1, "command": str(plugin.program), "args": ["eks", "get-token", "--cluster", "c1"],
        "env": [{"name": "PLUGIN_REGION", "value": "eu-west-1"}], "provideClusterInfo": True}},
        ca=ca, cluster={"extensions": [{"name": "client.authentication.k8s.io/exec",
                                        "extension": {"audience": "06e3fbd18de8"}}]})
    assert (await credential(path)).token == "t0ken"
    given = plugin.given(1)
    assert given["args"] == ["eks", "get-token", "--cluster", "c1"]
    assert given["env"] == {"PLUGIN_REGION": "eu-west-1"}
    assert given["stdin"] == ""
    assert given["exec_info"] == {
        "apiVersion": V1BETA1, "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": NOWHERE,
                                                   "certificate-authority-data": base64.b64encode(ca).decode(),
                                                   "config": {"audience": "06e3fbd18de8"}}}}


async def test_without_provide_cluster_info_the_plugin_is_told_nothing_of_the_cluster(tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("t"))
    await credential(config(tmp_path, exec_user(plugin)))
    assert plugin.given(1)["exec_info"] == {"apiVersion": V1, "kind": "ExecCredential",
                                            "spec": {"interactive": False}}


async def test_a_relative_command_with_a_slash_is_found_beside_the_kubeconfig(tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "bin")
    plugin.prints(exec_credential("t"))
    assert (await credential(config(tmp_path, exec_user(plugin, command="./bin/plugin")))).token == "t"


@pytest.mark.parametrize(("setup", "why"), [
    (lambda p: p.program.unlink(), "executable not found .install the example-auth-plugin."),
    (lambda p: p.fails(3, "AccessDenied: the role cannot be assumed\n"),
     "failed with exit code 3: AccessDenied: the role cannot be assumed"),
    (lambda p: p.prints("Please log in at https://example.com/device\n"),
     "printed something that is not an ExecCredential: 'Please log in"),
    (lambda p: p.prints(json.dumps({"apiVersion": V1, "kind": "Status"})), "not an ExecCredential"),
    (lambda p: p.prints(exec_credential("t", api_version=V1BETA1)),
     "expected an ExecCredential of API version client.authentication.k8s.io/v1, the plugin returned version "
     ".*v1beta1"),
    (lambda p: p.prints(json.dumps({"apiVersion": V1, "kind": "ExecCredential"})), "has no status"),
    (lambda p: p.prints(exec_credential("")), "neither a token nor a client certificate"),
    (lambda p: p.prints(exec_credential(cert=b"-----BEGIN CERTIFICATE-----")), "only a client certificate or"),
    (lambda p: p.prints(exec_credential("t").replace('"status": {', '"status": {"expirationTimestamp": "soon", ')),
     "invalid expirationTimestamp 'soon'"),
])
async def test_a_plugin_that_gives_no_credential_fails_the_request_before_it_is_sent_naming_the_user(
        tmp_path: Path, setup: Any, why: str) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("unused"))
    setup(plugin)
    client = KubeClient.from_kubeconfig(config(tmp_path, exec_user(plugin, installHint="install the "
                                                                   "example-auth-plugin"), user_name="eks-admin"))
    try:
        with pytest.raises(HostUnavailable, match=f"user 'eks-admin': exec plugin {plugin.program}: .*{why}") as e:
            await client.get("/api/v1/namespaces")
        assert type(e.value).__name__ == "CredentialError"  # no connection was tried
    finally:
        await client.close()


async def test_a_credential_without_expiry_is_kept_and_the_plugin_runs_once(tmp_path: Path) -> None:
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential("t"))
    client = KubeClient.from_kubeconfig(config(tmp_path, exec_user(plugin)))
    try:
        for _ in range(3):
            assert (await client.credentials.current()).token == "t"
        assert plugin.runs == 1
    finally:
        await client.close()


async def test_a_client_certificate_from_the_plugin_is_loaded(tmp_path: Path) -> None:
    ca = pki.new_ca("test-ca")
    leaf = pki.new_leaf(ca, "exec-user")
    plugin = Plugin.create(tmp_path / "plugin")
    plugin.prints(exec_credential(cert=leaf.cert_pem, key=leaf.key_pem))
    auth = await credential(config(tmp_path, exec_user(plugin)))
    assert auth.token == ""
    assert auth.ssl is not None
