"""The host client's verbs as the pods runtime uses them, against a recording stand-in for the host:
what each sends, and how a failure reaches the user (one RuntimeFailure naming what was being done)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from apiserver.kubeclient.client import ClusterAccess, KubeClient
from reconciler.runtime.base import RuntimeFailure
from reconciler.runtime.pods.host import Host

Obj = dict[str, Any]
SECRET: Obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "prod-etcd", "namespace": "ns"}}


class Recorder:
    """Answers every request with ``answer`` (status, body) and keeps what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, dict[str, str], str]] = []
        self.answer: tuple[int, Any] = (200, {})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.asked.append((request.method, request.path, dict(request.query), request.content_type))
        status, body = self.answer
        if isinstance(body, bytes):
            return web.Response(status=status, body=body, content_type="text/plain")
        return web.json_response(body, status=status)


@pytest.fixture
async def stand_in() -> AsyncIterator[tuple[Host, Recorder]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = KubeClient(ClusterAccess(f"http://127.0.0.1:{port}", ssl.create_default_context()))
    try:
        yield Host(client), recorder
    finally:
        await client.close()
        await runner.cleanup()


def status(code: int, reason: str, message: str) -> tuple[int, Obj]:
    return code, {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}


async def test_apply_is_a_forced_strict_server_side_apply_at_the_objects_own_path(stand_in: tuple[Host, Recorder]) -> None:
    host, recorder = stand_in
    recorder.answer = (200, SECRET)
    assert await host.apply(SECRET) == SECRET
    assert recorder.asked == [("PATCH", "/api/v1/namespaces/ns/secrets/prod-etcd",
                               {"fieldManager": "vc-apiserver", "force": "true", "fieldValidation": "Strict"},
                               "application/apply-patch+yaml")]


async def test_a_create_names_the_field_manager_and_may_find_the_object_there(stand_in: tuple[Host, Recorder]) -> None:
    host, recorder = stand_in
    recorder.answer = status(409, "AlreadyExists", "secrets \"prod-etcd\" already exists")
    await host.create(SECRET, exists_ok=True)
    assert recorder.asked == [("POST", "/api/v1/namespaces/ns/secrets", {"fieldManager": "vc-apiserver"},
                               "application/json")]
    with pytest.raises(RuntimeFailure) as failure:
        await host.create(SECRET)
    assert (failure.value.reason, failure.value.message) == (
        "AlreadyExists", 'creating Secret ns/prod-etcd: the host answered 409: secrets "prod-etcd" already exists')


async def test_what_is_gone_is_an_answer_to_a_read_or_a_delete(stand_in: tuple[Host, Recorder]) -> None:
    host, recorder = stand_in
    recorder.answer = status(404, "NotFound", "not found")
    assert await host.get("Secret", "ns", "prod-etcd") is None
    await host.delete("Secret", "ns", "prod-etcd")
    assert [(method, path) for method, path, _, _ in recorder.asked] == [
        ("GET", "/api/v1/namespaces/ns/secrets/prod-etcd"), ("DELETE", "/api/v1/namespaces/ns/secrets/prod-etcd")]


async def test_a_status_without_a_reason_is_a_rejection_and_no_answer_is_unavailability(
        stand_in: tuple[Host, Recorder]) -> None:
    host, recorder = stand_in
    recorder.answer = status(500, "", "etcd is down")
    with pytest.raises(RuntimeFailure) as failure:
        await host.list("Pod", "ns", "app=x")
    assert (failure.value.reason, failure.value.message) == (
        "HostRejected", "listing Pod: the host answered 500: etcd is down")
    gone = Host(KubeClient(ClusterAccess("http://127.0.0.1:1", ssl.create_default_context()), timeout=2))
    try:
        with pytest.raises(RuntimeFailure) as failure:
            await gone.get("Pod", "ns", "x")
        assert failure.value.reason == "HostUnavailable"
        assert failure.value.message.startswith("reading Pod ns/x: ")
    finally:
        await gone.client.close()


async def test_a_pods_log_is_read_as_text_with_its_parameters(stand_in: tuple[Host, Recorder]) -> None:
    host, recorder = stand_in
    recorder.answer = (200, b'{"taken": 1}\n\xff')
    assert await host.log("ns", "prod-backup-snapshot", container="backup", tailLines="10") == '{"taken": 1}\n\ufffd'
    assert recorder.asked[0][:3] == ("GET", "/api/v1/namespaces/ns/pods/prod-backup-snapshot/log",
                                     {"container": "backup", "tailLines": "10"})


async def test_scaling_to_zero_is_a_merge_patch_of_replicas(stand_in: tuple[Host, Recorder]) -> None:
    host, recorder = stand_in
    await host.scale_to_zero("Deployment", "ns", "prod-apiserver")
    assert recorder.asked == [("PATCH", "/apis/apps/v1/namespaces/ns/deployments/prod-apiserver",
                               {"fieldManager": "vc-apiserver"}, "application/merge-patch+json")]
