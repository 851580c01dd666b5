"""Fields given twice in a JSON body, found with or without the decoded document at hand."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver.endpoints.decode import duplicate_fields


@pytest.mark.parametrize(("body", "found"), [
    (b'{"a":1,"a":2}', ["a"]),
    (b'{"spec":{"list":[{"f":1},{"f":2,"f":3}]}}', ["spec.list[1].f"]),
    (b'{"a":"colons: \\"inside: strings\\" count for nothing","b":{"c":{}}}', []),
    (b'{"k\\\\":1,"k\\\\":2}', ["k\\"]),  # a key ending in an escaped backslash
    (b' { "a" : [ 1 , { "b" : null , "b" : true } ] } ', ["a[1].b"]),
    (b'{"a":{"b":1},"a":{"c":2}}', ["a"]),  # the second object wins, with fewer members than were given
    (b'{"x":1,"x":"\\u003a"}', ["x"]),  # an escaped colon makes up, in count, for the member lost
])
def test_fields_given_twice_are_found_with_the_decoded_document_or_without(body: bytes, found: list[str]) -> None:
    assert duplicate_fields(body, orjson.loads(body)) == found
    assert duplicate_fields(body) == found


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab:"\\{}[],', max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.lists(st.tuples(st.sampled_from(["a", "b", "c:", '"']), inner),
                                                         max_size=4).map(lambda pairs: ("pairs", pairs)),
    max_leaves=12)


def _text(value: object) -> str:
    """JSON text of a value whose objects are lists of pairs (so that a key can repeat)."""
    if isinstance(value, tuple):
        return "{" + ",".join(f"{json.dumps(k)}:{_text(v)}" for k, v in value[1]) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return json.dumps(value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_shortcut_agrees_with_the_full_parse(value: object) -> None:
    body = _text(value).encode()
    assert duplicate_fields(body, orjson.loads(body)) == duplicate_fields(body)
