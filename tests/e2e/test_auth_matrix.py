"""Who may do what, generated: every verb × subresource × identity, against a real host.

vc-apiserver runs behind a real kube-apiserver (the ``host_stack`` fixture) with delegated
authentication and authorization. For every cell of

    verb × subresource  get, list, watch, create, update, patch, delete, deletecollection;
                        status (get, update, patch); kubeconfig (get)
    × identity          namespace admin, edit, view, no binding, admin of another namespace,
                        ServiceAccount with edit, anonymous, spoofed X-Remote headers without
                        the front-proxy certificate, a front-proxy-CA certificate with a CN that
                        is not allowed, a certificate from an unknown CA

the request goes straight to vc-apiserver (and, for the six real identities, also through the
host's aggregator impersonating the identity, which is what ``kubectl --as`` sends), and:

- our answer agrees with ``kubectl auth can-i`` (``--subresource`` for subresources):
  allowed → neither 401 nor 403; denied → 403, or 401 when the caller is not authenticated
  at all (anonymous, spoofed headers, the impostor proxy: the host, asked about
  ``system:anonymous``, says no too); an unknown CA's certificate is refused in the TLS handshake;
- a denied request changed nothing: the object it aimed at keeps its resourceVersion and has
  no deletionTimestamp, and a denied create left no object behind.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from certs import pki
from hack.harness import FRONT_PROXY_CLIENT
from hack.stack import Stack
from tests.conftest import Kubectl, vc

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
NS, OTHER_NS = "matrix-a", "matrix-b"
RESOURCE = "virtualclusters.kosmos.io"
SHARED = "shared"  # the object every read aims at
ANONYMOUS = "system:anonymous"
CELLS = [(verb, "") for verb in ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")] \
    + [("get", "status"), ("update", "status"), ("patch", "status"), ("get", "kubeconfig")]
WRITES = {("update", ""), ("patch", ""), ("delete", ""), ("deletecollection", ""), ("update", "status"),
          ("patch", "status")}


@dataclass
class Identity:
    """One caller: how it authenticates directly, and whom ``kubectl auth can-i --as`` asks about."""

    key: str
    subject: str  # the user can-i is asked about (system:anonymous for callers that are nobody)
    authenticated: bool = True  # False: the server must not believe any identity it claims (401)
    cert: tuple[Path, Path] | None = None
    token: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    tls_refused: bool = False  # the handshake itself fails
    via_host: bool = False  # also sent through the host's aggregator, impersonating ``subject``


@dataclass
class Matrix:
    stack: Stack
    identities: list[Identity]
    allowed: dict[tuple[str, str, str], bool]  # (subject, verb, subresource) -> can-i says yes


def kubectl(stack: Stack) -> Kubectl:
    return Kubectl(stack.kubeconfig, host_namespaces=True)


def can_i(k: Kubectl, subject: str, verb: str, subresource: str) -> bool:
    """``kubectl auth can-i --as subject``. Anonymous may not even ask (SelfSubjectAccessReview needs an
    authenticated user), so for it the same question goes to the host as a SubjectAccessReview."""
    if subject == ANONYMOUS:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": ANONYMOUS, "groups": ["system:unauthenticated"], "resourceAttributes": {
                "namespace": NS, "verb": verb, "group": "kosmos.io", "resource": "virtualclusters",
                "subresource": subresource}}}
        out = k.run("create", "-f", "-", "-o", "json", input=json.dumps(review))
        return bool(json.loads(out.stdout)["status"].get("allowed"))
    extra = [f"--subresource={subresource}"] if subresource else []
    out = k.run("auth", "can-i", verb, RESOURCE, *extra, "-n", NS, "--as", subject, check=False)
    answer = out.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i {verb} {RESOURCE} {extra} --as {subject}: {out.stderr}"
    return answer == "yes"


def cell_name(path: str, identity: Identity, verb: str, subresource: str) -> str:
    return f"{path}-{identity.key}-{verb}-{subresource or 'main'}".lower()


@pytest.fixture(scope="module")
def matrix(host_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    k = kubectl(host_stack)
    for ns in (NS, OTHER_NS):
        k.ensure_namespace(ns)
    bindings = [("alice-admin", "admin", "--user=alice", NS), ("erin-edit", "edit", "--user=erin", NS),
                ("victor-view", "view", "--user=victor", NS), ("olga-admin", "admin", "--user=olga", OTHER_NS),
                ("robot-edit", "edit", f"--serviceaccount={NS}:robot", NS)]
    k.run("create", "serviceaccount", "robot", "-n", NS)
    for name, role, subject, ns in bindings:
        k.run("create", "rolebinding", name, f"--clusterrole={role}", subject, "-n", ns)
    deadline = time.monotonic() + 60  # the clusterrole aggregation controller fills admin, edit and view
    while not (can_i(k, "alice", "create", "") and can_i(k, "erin", "get", "kubeconfig")
               and can_i(k, "victor", "list", "")):
        assert time.monotonic() < deadline, "the aggregated VirtualCluster roles never reached admin/edit/view"
        time.sleep(0.5)

    certs = tmp_path_factory.mktemp("matrix-certs")
    host = host_stack.host.pki
    host_ca = pki.KeyPair.read(host.dir, "ca")
    front_ca = pki.KeyPair.read(host.dir, "front-proxy-ca")

    def leaf(ca: pki.KeyPair, stem: str, cn: str, orgs: tuple[str, ...] = ()) -> tuple[Path, Path]:
        return pki.new_leaf(ca, cn, organizations=list(orgs)).write(certs, stem)

    spoof = {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"}
    token = k.run("create", "token", "robot", "-n", NS, "--duration=1h").stdout.strip()
    assert FRONT_PROXY_CLIENT != "not-the-front-proxy"
    identities = [
        Identity("admin", "alice", cert=leaf(host_ca, "alice", "alice"), via_host=True),
        Identity("edit", "erin", cert=leaf(host_ca, "erin", "erin"), via_host=True),
        Identity("view", "victor", cert=leaf(host_ca, "victor", "victor"), via_host=True),
        Identity("nobinding", "nobody", cert=leaf(host_ca, "nobody", "nobody"), via_host=True),
        Identity("otheradmin", "olga", cert=leaf(host_ca, "olga", "olga"), via_host=True),
        Identity("sa-edit", f"system:serviceaccount:{NS}:robot", token=token, via_host=True),
        Identity("anonymous", ANONYMOUS, authenticated=False),
        Identity("spoofed", ANONYMOUS, authenticated=False, headers=spoof),
        Identity("impostor", ANONYMOUS, authenticated=False, headers=spoof,
                 cert=leaf(front_ca, "impostor", "not-the-front-proxy")),
        Identity("unknownca", ANONYMOUS, authenticated=False, headers=spoof, tls_refused=True,
                 cert=leaf(pki.new_ca("unknown-ca"), "stranger", "kubernetes-admin", ("system:masters",))),
    ]

    # One object per write cell (a write must not disturb another cell's object), one shared for reads.
    objects = [vc(SHARED, NS)]
    for path, members in (("d", identities), ("v", [i for i in identities if i.via_host])):
        for identity in members:
            for verb, subresource in CELLS:
                if (verb, subresource) in WRITES:
                    name = cell_name(path, identity, verb, subresource)
                    objects.append(vc(name, NS, labels={"cell": name}))
    k.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    deadline = time.monotonic() + 90  # the reconciler writes a first status on each: let it, before measuring
    while True:
        items = k.json("get", "virtualclusters.kosmos.io", "-n", NS)["items"]
        if len(items) >= len(objects) and all(
                (i.get("status") or {}).get("observedGeneration") == i["metadata"]["generation"] for i in items):
            break
        assert time.monotonic() < deadline, "the reconciler never observed the matrix objects"
        time.sleep(0.5)

    subjects = sorted({i.subject for i in identities})
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = [(s, verb, sub) for s in subjects for verb, sub in CELLS]
        answers = list(pool.map(lambda key: can_i(k, *key), keys))
    allowed = dict(zip(keys, answers, strict=True))
    assert not any(allowed[(ANONYMOUS, verb, sub)] for verb, sub in CELLS), "anonymous may do nothing"
    yield Matrix(host_stack, identities, allowed)


def direct_ssl(stack: Stack, identity: Identity) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(stack.api.serving_ca))
    ctx.check_hostname = False
    if identity.cert:
        ctx.load_cert_chain(str(identity.cert[0]), str(identity.cert[1]))
    return ctx


def host_ssl(stack: Stack) -> ssl.SSLContext:
    host = stack.host.pki
    ctx = ssl.create_default_context(cafile=str(host.path("ca.crt")))
    ctx.load_cert_chain(str(host.path("admin.crt")), str(host.path("admin.key")))
    return ctx


def request_for(verb: str, subresource: str, name: str, current: dict[str, Any]) -> tuple[str, str, bytes | None,
                                                                                          str]:
    """(method, path, body, content type) of one cell, aimed at ``name`` (its current state given)."""
    collection = f"{GV}/namespaces/{NS}/virtualclusters"
    item = f"{collection}/{name}" + (f"/{subresource}" if subresource else "")
    if verb == "get":
        return "GET", item, None, ""
    if verb == "list":
        return "GET", collection, None, ""
    if verb == "watch":
        return "GET", f"{collection}?watch=true&timeoutSeconds=0", None, ""
    if verb == "create":
        return "POST", collection, json.dumps(vc(name, NS)).encode(), "application/json"
    if verb == "update":
        changed = json.loads(json.dumps(current))
        changed["metadata"].setdefault("labels", {})["touched"] = "yes"
        changed.setdefault("status", {})["message"] = "touched"
        return "PUT", item, json.dumps(changed).encode(), "application/json"
    if verb == "patch":
        patch = {"status": {"message": "patched"}} if subresource else {"metadata": {"labels": {"patched": "yes"}}}
        return "PATCH", item, json.dumps(patch).encode(), "application/merge-patch+json"
    if verb == "delete":
        return "DELETE", item, None, ""
    assert verb == "deletecollection"
    return "DELETE", f"{collection}?labelSelector=cell%3D{name}", None, ""


async def send(session: aiohttp.ClientSession, url: str, method: str, path: str, body: bytes | None,
               content_type: str, headers: dict[str, str]) -> int | None:
    """The HTTP status, or None when the TLS handshake refused the caller."""
    all_headers = {**headers, **({"Content-Type": content_type} if content_type else {})}
    try:
        async with session.request(method, url + path, data=body, headers=all_headers,
                                   timeout=aiohttp.ClientTimeout(total=30)) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, ssl.SSLError):  # for anyone but the unknown CA's caller, a failed cell
        return None


async def admin_get(admin: aiohttp.ClientSession, stack: Stack, name: str) -> tuple[int, dict[str, Any]]:
    async with admin.get(f"{stack.api.url}{GV}/namespaces/{NS}/virtualclusters/{name}") as resp:
        return resp.status, await resp.json()


async def test_every_verb_subresource_and_identity_gets_the_answer_kubectl_auth_can_i_gives(
        matrix: Matrix) -> None:
    stack = matrix.stack
    host = stack.host.pki
    admin_ctx = ssl.create_default_context(cafile=str(stack.api.serving_ca))
    admin_ctx.check_hostname = False
    admin_ctx.load_cert_chain(str(host.path("admin.crt")), str(host.path("admin.key")))  # system:masters
    mismatches: list[str] = []
    changed: list[str] = []
    table: dict[str, list[str]] = {}
    cells = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=admin_ctx)) as admin:
        for path in ("direct", "via-host"):
            for identity in matrix.identities:
                if path == "via-host" and not identity.via_host:
                    continue
                if path == "direct":
                    ctx, url = direct_ssl(stack, identity), stack.api.url
                    headers = dict(identity.headers)
                    if identity.token:
                        headers["Authorization"] = f"Bearer {identity.token}"
                else:
                    ctx, url = host_ssl(stack), stack.host.url
                    headers = {"Impersonate-User": identity.subject}  # what kubectl --as sends
                connector = aiohttp.TCPConnector(ssl=ctx, force_close=True)
                async with aiohttp.ClientSession(connector=connector) as session:
                    for verb, subresource in CELLS:
                        cells += 1
                        name = cell_name(path[0], identity, verb, subresource) \
                            if (verb, subresource) in WRITES or verb == "create" else SHARED
                        before = None
                        if verb != "create":
                            code, before = await admin_get(admin, stack, name)
                            assert code == 200, before
                        method, target, body, content_type = request_for(verb, subresource, name, before or {})
                        status = await send(session, url, method, target, body, content_type, headers)
                        allowed = matrix.allowed[(identity.subject, verb, subresource)]
                        table.setdefault(f"{path:8} {identity.key:10}", []).append(
                            f"{'TLS' if status is None else status}{'+' if allowed else '-'}")
                        if identity.tls_refused:
                            expected = "TLS refused"
                            ok = status is None
                        elif allowed:
                            expected = "allowed (neither 401 nor 403)"
                            ok = status is not None and status not in (401, 403)
                        else:
                            expected = "403" if identity.authenticated else "401"
                            ok = status == int(expected)
                        if not ok:
                            mismatches.append(f"{path:8} {identity.key:10} {verb:16} {subresource or '-':10} "
                                              f"can-i={'yes' if allowed else 'no'} expected {expected}, got {status}")
                        if allowed and not identity.tls_refused:
                            continue
                        if verb == "create":
                            code, _ = await admin_get(admin, stack, name)
                            if code != 404:
                                changed.append(f"{path} {identity.key}: a denied create left {name} behind")
                        elif before is not None:
                            code, after = await admin_get(admin, stack, name)
                            meta, old = after.get("metadata", {}), before["metadata"]
                            if code != 200 or meta.get("resourceVersion") != old["resourceVersion"] \
                                    or meta.get("deletionTimestamp"):
                                changed.append(f"{path} {identity.key} {verb} {subresource}: {name} changed "
                                               f"({code}, rv {old['resourceVersion']} -> {meta.get('resourceVersion')})")
    size = f"{len(CELLS)} verb/subresource pairs × {len(matrix.identities)} identities directly + " \
           f"{sum(i.via_host for i in matrix.identities)} through the host = {cells} cells"
    print(f"authorization matrix: {size} (answer, + where can-i says yes)")
    print(" " * 20 + " ".join(f"{verb[:6] + ('/' + sub[:4] if sub else ''):<11}" for verb, sub in CELLS))
    for row, answers in table.items():
        print(f"{row:20}" + " ".join(f"{a:<11}" for a in answers))
    assert cells == len(CELLS) * (len(matrix.identities) + sum(i.via_host for i in matrix.identities))
    assert not mismatches, "answers that disagree with kubectl auth can-i:\n" + "\n".join(mismatches)
    assert not changed, "denied requests that changed something:\n" + "\n".join(changed)
