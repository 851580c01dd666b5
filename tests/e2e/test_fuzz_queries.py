"""Hostile query parameters get an answer or a 400 Status, never another namespace's data: odd label
and field selectors, forged and mutated continue tokens (400/410, or a page of the namespace asked
for), bad resourceVersion/timeoutSeconds/watch parameters, unknown parameters (ignored).

The last test runs after every hostile-input file (``test_fuzz_*.py`` in name order): the server
is still ready after all of it, and how each fuzzer was answered is printed.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import Server
from tests.support.bodies import continue_token
from tests.support.client import GV, assert_survived, call, collection, ensure, log_mark
from tests.support.report import TALLY
from tests.support.status import too_large_resource_version
from tests.support.strategies import JSON_SCALARS, examples

pytestmark = pytest.mark.e2e


# -- selectors ------------------------------------------------------------------------------------

ODD_LABEL_SELECTORS = [
    "", " ", ",", ",,", "=", "==", "!=", "!", "!!a", "a", "a=", "a==", "a!=", "a=b=c", "a in", "a in (", "a in ()",
    "a in (,)", "a notin (b,", "a in (b c)", "(a)", "a,", ",a", "a=b,,c=d", "a>", "a>b", "a<1", "a>1.5", "a>-1",
    "a>99999999999999999999", "x/y=z", "/a=b", "a/=b", "a/b/c=d", "a" * 64 + "=b", "a=" + "b" * 64,
    "a\x00=b", "a=b\x00", "a=\t\nb", "\u00e9=b", "a=\u00e9", "a\u2028b", "a=\"b\"", "a='b'", "a=%FF", "a in (b)in",
    "!a=b", "a=b;c=d", "a==b==c", "in", "notin", "in in (in)", "a notin ()", "{", "}", "a=b)", "a=(b)",
]
ODD_FIELD_SELECTORS = [
    "", "=", ",", "metadata.name", "metadata.name=", "metadata.name==x", "metadata.name!=x", "metadata.name=x,",
    "metadata.name=a\\,b", "metadata.name=a\\", "metadata.name=a\\q", "metadata.name=a,b", "metadata.name=a=b",
    "metadata.namespace=other", "metadata.uid=x", "spec.externalIP=x", "status.phase=Pending", "x=y", "=x",
    "metadata.name=\x00", "metadata.name=..", "metadata.name=a/b", "metadata.name=%2F", "metadata.name=" + "a" * 300,
    "metadata.name=\u00e9", "metadata.name in (a)", "metadata.name>1",
]


async def test_odd_label_and_field_selectors_get_an_answer_or_a_400(http: aiohttp.ClientSession, server: Server,
                                                                    log_start: int) -> None:
    ns = "fuzz-selectors"
    await ensure(http, ns, "a")
    await ensure(http, ns, "b")
    for param, values in (("labelSelector", ODD_LABEL_SELECTORS), ("fieldSelector", ODD_FIELD_SELECTORS)):
        for value in values:
            for path in (collection(ns), f"{GV}/virtualclusters"):
                code, body = await call(http, "GET", path, params={param: value})
                assert code in (200, 400), (param, value, code, body)
                if code == 200:
                    assert all(item["metadata"]["namespace"] == ns for item in body["items"]) or \
                        path == f"{GV}/virtualclusters"
                code, _ = await call(http, "GET", path, params={param: value, "watch": "true", "timeoutSeconds": "0"})
                assert code in (200, 400), (param, value, code)
            code, _ = await call(http, "DELETE", collection(ns), params={param: value, "dryRun": "All"})
            assert code in (200, 400), (param, value, code)
    code, body = await call(http, "GET", collection(ns))
    assert sorted(item["metadata"]["name"] for item in body["items"]) == ["a", "b"], "dry runs deleted nothing"
    await assert_survived(http, server, log_start)


@examples(60)
@given(param=st.sampled_from(["labelSelector", "fieldSelector"]), value=st.text(max_size=40),
       watch=st.booleans())
async def test_hypothesis_selectors_get_an_answer_or_a_400(http: aiohttp.ClientSession, server: Server,
                                                           param: str, value: str,
                                                           watch: bool) -> None:
    start = log_mark(server)
    params = {param: value, **({"watch": "true", "timeoutSeconds": "0"} if watch else {})}
    code, _ = await call(http, "GET", collection("fuzz-selectors"), params=params)
    assert code in (200, 400)
    await assert_survived(http, server, start)


# -- continue tokens ------------------------------------------------------------------------------

CONTINUE_A, CONTINUE_B = "fuzz-continue-a", "fuzz-continue-b"


@pytest.fixture
async def two_namespaces(http: aiohttp.ClientSession) -> dict[str, list[str]]:
    """Three objects in each of two namespaces, so a token can be aimed at the other one."""
    names = {CONTINUE_A: ["a1", "a2", "a3"], CONTINUE_B: ["b1", "b2", "b3"]}
    for ns, objs in names.items():
        for name in objs:
            await ensure(http, ns, name)
    return names


async def list_all(http: aiohttp.ClientSession, path: str, **params: str) -> tuple[int, Any]:
    return await call(http, "GET", path, params=params)


async def test_forged_continue_tokens_never_reveal_another_namespace(
        http: aiohttp.ClientSession, server: Server, log_start: int, two_namespaces: dict[str, list[str]]) -> None:
    """A tampered, forged or foreign continue token is 400 or 410 — or, if it still decodes to a
    position in this namespace, a page of this namespace only. Never a B object on A's path."""
    path_a, path_b = collection(CONTINUE_A), collection(CONTINUE_B)
    code, page = await list_all(http, path_a, limit="1")
    assert code == 200 and [i["metadata"]["name"] for i in page["items"]] == ["a1"]
    real = page["metadata"]["continue"]
    rv = int(page["metadata"]["resourceVersion"])
    names, token = ["a1"], real
    while token:  # the real token pages through A exactly once
        code, page = await list_all(http, path_a, limit="1", **{"continue": token})
        assert code == 200
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
    assert names == ["a1", "a2", "a3"]
    _, page_b = await list_all(http, path_b, limit="1")
    _, page_all = await list_all(http, f"{GV}/virtualclusters", limit="1")
    decoded = json.loads(base64.urlsafe_b64decode(real + "=" * (-len(real) % 4)))
    forged = [
        page_b["metadata"]["continue"],                        # B's own token, replayed on A
        page_all["metadata"]["continue"],                      # a cluster-wide token, replayed on A
        real[:-1], real + "A", real[::-1], real.upper(), "", " ", "%%%", "!!!!", "a" * 5000,
        base64.b64encode(json.dumps(decoded).encode()).decode(),  # standard alphabet, padded
        continue_token([1]), continue_token("x"), continue_token(None), continue_token({}),
        continue_token({**decoded, "v": "meta.k8s.io/v2"}),
    ]
    forged += [continue_token({**decoded, "rv": value}) for value in
               (0, -1, 1, rv + 1_000_000, 2**63 - 1, 2**63, 2**64, "3", 3.5, True, None, [rv], {"rv": rv})]
    forged += [continue_token({**decoded, "start": value}) for value in
               (f"../{CONTINUE_B}/b1", f"../{CONTINUE_B}/", f"/{CONTINUE_B}/b1", f"{CONTINUE_B}/b1",
                f"{CONTINUE_B}/b1\x00", "..", ".", "/", "", "\x00", "a1/../../x", "a1/./a2", "\\..\\x", "a1%2F..",
                "\uffff", 7, None, ["a1"])]
    for token in forged:
        for limit in ("1", "2", "0", "500"):
            code, body = await list_all(http, path_a, limit=limit, **{"continue": token})
            assert code in (200, 400, 410), (token, code, body)
            if code == 200:
                namespaces = {item["metadata"]["namespace"] for item in body["items"]}
                assert namespaces <= {CONTINUE_A}, f"token {token!r} showed {namespaces} on {path_a}"
    await assert_survived(http, server, log_start)


@examples(60)
@given(mutation=st.one_of(st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
                          st.text(max_size=60),
                          st.fixed_dictionaries({"v": st.just("meta.k8s.io/v1") | st.text(max_size=5),
                                                 "rv": JSON_SCALARS, "start": JSON_SCALARS}).map(continue_token)),
       limit=st.sampled_from(["1", "2", "0", "-1", "abc", str(2**63), "99999999999999999999", ""]))
async def test_hypothesis_continue_tokens_never_reveal_another_namespace(
        http: aiohttp.ClientSession, server: Server, two_namespaces: dict[str, list[str]],
        mutation: str, limit: str) -> None:
    start = log_mark(server)
    code, body = await list_all(http, collection(CONTINUE_A), limit=limit, **{"continue": mutation})
    assert code in (200, 400, 410), (mutation, limit, code)
    if code == 200:
        assert {item["metadata"]["namespace"] for item in body["items"]} <= {CONTINUE_A}
    await assert_survived(http, server, start)


# -- other parameters -----------------------------------------------------------------------------

async def test_bad_resource_version_timeout_and_watch_parameters_get_a_400(
        http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    """As kube-apiserver answers them: a resourceVersion that is no uint64 is a 400 (kube's own 500
    on a watch is a 400 here); integers are Go's ParseInt's; a boolean is false only as "0" or
    "false" in any case, anything else is true."""
    ns = "fuzz-params"
    await ensure(http, ns, "target")
    path = collection(ns)
    for rv in ("-1", "abc", "1.5", "1e3", "\u0663", " 1", "1 ", "+1", "0x10", "1_0", str(2**64), "9" * 40):
        for watch in ("false", "true"):
            code, status = await call(http, "GET", path, params={"resourceVersion": rv, "watch": watch,
                                                                 "timeoutSeconds": "0"})
            assert code == 400, (rv, watch, code, status)
        code, _ = await call(http, "GET", path, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
        assert code == 400, rv
    for match in ("exact", "NotOlderThan ", "Bogus", "\u0000"):
        code, _ = await call(http, "GET", path, params={"resourceVersion": "1", "resourceVersionMatch": match})
        assert code in (400, 422), match
    for timeout in ("abc", "1.5", "1e400", "9" * 30, str(2**63), "\u0663", " 1"):
        code, _ = await call(http, "GET", path, params={"watch": "true", "timeoutSeconds": timeout})
        assert code == 400, timeout
    for timeout in ("-5", "0", str(2**63 - 1)):
        async with http.get(path, params={"watch": "true", "timeoutSeconds": timeout}) as resp:
            assert resp.status == 200
            first = await resp.content.readline()  # the synthetic ADDED of the target, then we leave
            assert json.loads(first)["type"] == "ADDED"
    for watch in ("yes", "2", "on", "\u0000", "true ", ""):  # all true to kube (Convert_Slice_string_To_bool)
        async with http.get(path, params={"watch": watch, "timeoutSeconds": "1"}) as resp:
            assert resp.status == 200, watch
            assert json.loads(await resp.content.readline())["type"] == "ADDED"
    for watch in ("0", "FALSE", "False"):
        code, body = await call(http, "GET", path, params={"watch": watch})
        assert code == 200 and body["kind"] == "VirtualClusterList", watch
    for param in ("allowWatchBookmarks", "sendInitialEvents"):  # true; sendInitialEvents wants its match
        async with http.get(path, params={"watch": "true", "timeoutSeconds": "0", param: "maybe"}) as resp:
            assert resp.status == (200 if param == "allowWatchBookmarks" else 422), param
    # A resourceVersion the server has not reached: a list waits for it, then kube's 504
    # ResourceVersionTooLarge; a watch from it is established and waits for its events.
    for params in ({"resourceVersion": str(2**63 - 1)}, {"resourceVersion": str(2**64 - 1)},
                   {"resourceVersion": str(2**63 - 1), "resourceVersionMatch": "Exact"}):
        code, status = await call(http, "GET", path, params=params, future_rv=True)
        assert code == 504 and too_large_resource_version(status), (params, status)
    async with http.get(path, params={"watch": "true", "resourceVersion": str(2**63 - 1), "timeoutSeconds": "1"}) as r:
        assert r.status == 200 and await r.read() == b""
    await assert_survived(http, server, log_start)


KNOWN_PARAMS = {"watch", "labelSelector", "fieldSelector", "limit", "continue", "resourceVersion",
                "resourceVersionMatch", "timeoutSeconds", "allowWatchBookmarks", "sendInitialEvents", "dryRun",
                "fieldValidation", "fieldManager", "propagationPolicy", "gracePeriodSeconds", "includeObject",
                "expirationSeconds", "orphanDependents", "pretty"}


@examples(40)
@given(extra=st.dictionaries(st.text(min_size=1, max_size=15).filter(lambda k: k not in KNOWN_PARAMS),
                             st.text(max_size=15), min_size=1, max_size=4))
async def test_unknown_query_parameters_are_ignored(http: aiohttp.ClientSession, server: Server, extra: dict[str, str]) -> None:
    start = log_mark(server)
    ns = "fuzz-unknown"
    target = await ensure(http, ns, "target")
    code, body = await call(http, "GET", collection(ns), params=extra)
    assert code == 200 and [i["metadata"]["name"] for i in body["items"]] == ["target"]
    code, body = await call(http, "GET", f"{collection(ns)}/target", params=extra)
    assert code == 200 and body["metadata"]["uid"] == target["metadata"]["uid"]
    code, body = await call(http, "PATCH", f"{collection(ns)}/target", b'{"metadata":{"labels":{"seen":"yes"}}}',
                            params=extra, content_type="application/merge-patch+json")
    assert code == 200
    await assert_survived(http, server, start)


# -- after all of it ------------------------------------------------------------------------------

async def test_the_server_is_still_ready_after_all_of_it(http: aiohttp.ClientSession) -> None:
    async with http.get("/readyz", params={"verbose": "1"}) as resp:
        text = await resp.text()
        assert resp.status == 200 and "readyz check passed" in text, text
    for fuzzer, counts in TALLY.items():
        print(f"{fuzzer}: {sum(counts.values())} requests, answers {dict(sorted(counts.items()))}")
