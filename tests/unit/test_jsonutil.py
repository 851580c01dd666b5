"""Wire helpers on the write path: private copies of decoded JSON, and the nesting limit."""

from __future__ import annotations

import json

import orjson
import pytest

from apiserver.machinery import errors
from apiserver.machinery.jsonutil import MAX_NESTING_DEPTH, check_nesting, json_copy


def test_a_json_copy_is_equal_and_shares_nothing_with_the_original() -> None:
    original = {"spec": {"promotePolicies": [{"nodeCount": 1, "labelSelector": {"matchLabels": {"a": "b"}}}]},
                "ratio": 0.5, "flag": True, "none": None, "text": "\u00e9\U0001f600"}
    copied = json_copy(original)
    assert copied == original
    copied["spec"]["promotePolicies"][0]["labelSelector"]["matchLabels"]["a"] = "changed"
    assert original["spec"]["promotePolicies"][0]["labelSelector"]["matchLabels"]["a"] == "b"


def test_a_json_copy_keeps_integers_beyond_64_bits_that_validation_will_refuse() -> None:
    original = {"spec": {"nodeCount": 2**70}, "list": [2**64]}
    copied = json_copy(original)
    assert copied == original and copied["spec"] is not original["spec"]


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("with_raw", [True, False])
def test_nesting_up_to_the_limit_is_accepted_and_one_level_more_refused(with_raw: bool) -> None:
    at_limit, over = nested(MAX_NESTING_DEPTH), nested(MAX_NESTING_DEPTH + 1)
    check_nesting(orjson.loads(at_limit), raw=at_limit if with_raw else None)
    with pytest.raises(errors.ApiError) as refused:
        check_nesting(orjson.loads(over), raw=over if with_raw else None)
    assert refused.value.code == 400 and f"exceeded max depth of {MAX_NESTING_DEPTH}" in refused.value.message


def test_brackets_inside_strings_do_not_make_a_shallow_document_too_deep() -> None:
    raw = orjson.dumps({"a": "{[" * 500})
    check_nesting(orjson.loads(raw), raw=raw)


@pytest.mark.parametrize("depth", [2, MAX_NESTING_DEPTH - 1, MAX_NESTING_DEPTH, MAX_NESTING_DEPTH + 1, 300])
def test_a_wide_document_is_refused_exactly_when_one_branch_is_too_deep(depth: int) -> None:
    wide = {f"k{i}": [{"x": [i]}] for i in range(200)}  # more brackets than the limit, all shallow
    wide["deep"] = orjson.loads(nested(depth - 1))  # the document itself is one level more
    raw = json.dumps(wide).encode()  # (orjson encodes no more than 255 levels)
    if depth <= MAX_NESTING_DEPTH:
        check_nesting(wide, raw=raw)
    else:
        with pytest.raises(errors.ApiError):
            check_nesting(wide, raw=raw)
