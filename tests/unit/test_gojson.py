"""Go's JSON scanner, type errors and base64 as kube-apiserver's messages quote them."""

from __future__ import annotations

import pytest

from apiserver.machinery.gojson import (
    GoBase64Error,
    base64_raw_url_decode,
    quote_char,
    syntax_error,
    type_error,
)


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a":1}', None),
    (b" [ ] ", None),
    (b'"\\u00e9\\n"', None),
    (b"-1.5e+3", None),
    (b"", "unexpected end of JSON input"),
    (b'{"apiVersion": ', "unexpected end of JSON input"),
    (b"[", "unexpected end of JSON input"),
    (b'"abc', "unexpected end of JSON input"),
    # At the end of the input Go's scanner steps one more space: a value cut short names ' '.
    (b"-", "invalid character ' ' in numeric literal"),
    (b"1.", "invalid character ' ' after decimal point in numeric literal"),
    (b"1e+", "invalid character ' ' in exponent of numeric literal"),
    (b"tr", "invalid character ' ' in literal true (expecting 'u')"),
    (b"nul", "invalid character ' ' in literal null (expecting 'l')"),
    (b'"\\', "invalid character ' ' in string escape code"),
    (b"a", "invalid character 'a' looking for beginning of value"),
    (b"[1,]", "invalid character ']' looking for beginning of value"),
    (b'{"a":}', "invalid character '}' looking for beginning of value"),
    (b"{,}", "invalid character ',' looking for beginning of object key string"),
    (b'{"a" 1}', "invalid character '1' after object key"),
    (b'{"a":1 "b"}', "invalid character '\"' after object key:value pair"),
    (b"[1 2]", "invalid character '2' after array element"),
    (b"1x", "invalid character 'x' after top-level value"),
    (b"01", "invalid character '1' after top-level value"),
    (b"-a", "invalid character 'a' in numeric literal"),
    (b'"\\x"', "invalid character 'x' in string escape code"),
    (b'"\\u12"', "invalid character '\"' in \\u hexadecimal character escape"),
    (b'"\x01"', "invalid character '\\x01' in string literal"),
    (b"\xff", "invalid character '\u00ff' looking for beginning of value"),
    (b"[" * 10001, "invalid character '[' exceeded max depth"),
])
def test_syntax_errors_are_gos(data: bytes, message: str | None) -> None:
    assert syntax_error(data) == message


def test_characters_are_quoted_as_go_quotes_them() -> None:
    assert [quote_char(c) for c in (0x27, 0x22, 0x0A, 0x7F, ord("x"))] == ["'\\''", "'\"'", "'\\n'", "'\\x7f'", "'x'"]


def test_type_errors_name_the_json_kind_and_the_go_type() -> None:
    assert type_error([], "map[string]interface {}") == \
        "json: cannot unmarshal array into Go value of type map[string]interface {}"
    assert type_error(5, "string", ".kind") == "json: cannot unmarshal number into Go struct field .kind of type string"
    assert type_error(True, "int64", "continueToken.rv") == \
        "json: cannot unmarshal bool into Go struct field continueToken.rv of type int64"


def test_base64_is_gos_raw_url_encoding() -> None:
    assert base64_raw_url_decode("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ") == b'{"v":"meta.k8s.io/v1"}'
    assert base64_raw_url_decode("abc") == b"i\xb7"
    for text, offset in (("a", 0), ("ab=c", 2), ("a!bc", 1), ("abcde", 4)):
        with pytest.raises(GoBase64Error, match=f"illegal base64 data at input byte {offset}$"):
            base64_raw_url_decode(text)
