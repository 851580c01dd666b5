"""Go's ``encoding/json`` and ``encoding/base64`` as far as their errors reach a client: kube-apiserver
decodes bodies, patches and continue tokens with them and puts their messages in its answers
(``unexpected end of JSON input``, ``invalid character 'x' looking for beginning of value``,
``json: cannot unmarshal array into Go value of type ...``, ``illegal base64 data at input byte 3``).

:func:`syntax_error` is Go's scanner (``encoding/json/scanner.go``) as a table of states: it finds the
first syntax error of a document exactly where Go does and words it as Go does. Type errors, which Go
reports only for well-formed documents, are worded by :func:`type_error`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_DEPTH", "GoBase64Error", "base64_raw_url_decode", "json_kind", "quote_char", "syntax_error",
           "type_error"]

MAX_DEPTH = 10000  # Go's maxNestingDepth

_SPACE = b" \t\r\n"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = b'bfnrt\\/"'
_STRING_RUN = re.compile(rb'[^"\\\x00-\x1f]*')
_LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}
_LITERAL_NAMES = {ord("t"): "true", ord("f"): "false", ord("n"): "null"}

_GO_QUOTE = {0x07: "\\a", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x0B: "\\v",
             0x5C: "\\\\"}


def quote_char(c: int) -> str:
    """Go's ``quoteChar``: a byte as the scanner names it in an error ('x', '\\n', '\\x01', 'ÿ')."""
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    if c in _GO_QUOTE:
        return f"'{_GO_QUOTE[c]}'"
    ch = chr(c)  # Go's string(byte) is the rune of that number
    if c < 0x20 or c == 0x7F:
        return f"'\\x{c:02x}'"
    if 0x80 <= c < 0xA0 or c == 0xAD:  # not printable as Go's strconv.Quote sees them
        return f"'\\u{c:04x}'"
    return f"'{ch}'"


class _Error(Exception):
    pass


def _char_at(data: bytes, at: int) -> str:
    """The character the scanner stands on; at the end of the input Go's scanner steps one more
    space (``scanner.eof``), so a value cut short in a number, literal or escape names ' '."""
    return quote_char(data[at]) if at < len(data) else "' '"


def syntax_error(data: bytes) -> str | None:
    """The message of the first syntax error Go's scanner finds in ``data``, or None when it is
    valid JSON (Go's ``checkValid``)."""
    n = len(data)
    stack: list[str] = []  # "key", "value" (in an object), "array"
    i = 0

    def error(at: int, context: str) -> _Error:
        return _Error(f"invalid character {quote_char(data[at])} {context}")

    def skip_space(at: int) -> int:
        while at < n and data[at] in _SPACE:
            at += 1
        return at

    def push(kind: str) -> None:
        stack.append(kind)
        if len(stack) > MAX_DEPTH:
            raise error(i, "exceeded max depth")

    try:
        state = "value"  # expecting the beginning of a value
        while True:
            if state == "value":
                i = skip_space(i)
                if i == n:
                    raise _Error("unexpected end of JSON input")
                c = data[i]
                if c == ord("{"):
                    push("key")
                    i = skip_space(i + 1)
                    if i == n:
                        raise _Error("unexpected end of JSON input")
                    if data[i] == ord("}"):
                        stack[-1] = "value"
                        i += 1
                        stack.pop()
                        state = "end"
                        continue
                    if data[i] != ord('"'):
                        raise error(i, "looking for beginning of object key string")
                    i = _string(data, i + 1)
                    state = "end"
                    continue
                if c == ord("["):
                    push("array")
                    i = skip_space(i + 1)
                    if i == n:
                        raise _Error("unexpected end of JSON input")
                    if data[i] == ord("]"):
                        i += 1
                        stack.pop()
                        state = "end"
                        continue
                    state = "value"
                    continue
                if c == ord('"'):
                    i = _string(data, i + 1)
                elif c == ord("-") or c in _DIGITS:
                    i = _number(data, i)
                elif c in _LITERALS:
                    rest = _LITERALS[c]
                    for k, want in enumerate(rest):
                        at = i + 1 + k
                        if at == n or data[at] != want:
                            raise _Error(f"invalid character {_char_at(data, at)} in literal "
                                         f"{_LITERAL_NAMES[c]} (expecting {quote_char(want)})")
                    i += 1 + len(rest)
                else:
                    raise error(i, "looking for beginning of value")
                state = "end"
                continue
            # state == "end": a value just ended
            if not stack:
                i = skip_space(i)
                if i < n:
                    raise error(i, "after top-level value")
                return None
            i = skip_space(i)
            if i == n:
                raise _Error("unexpected end of JSON input")
            c = data[i]
            top = stack[-1]
            if top == "key":
                if c != ord(":"):
                    raise error(i, "after object key")
                stack[-1] = "value"
                i += 1
                state = "value"
            elif top == "value":
                if c == ord(","):
                    stack[-1] = "key"
                    i = skip_space(i + 1)
                    if i == n:
                        raise _Error("unexpected end of JSON input")
                    if data[i] != ord('"'):
                        raise error(i, "looking for beginning of object key string")
                    i = _string(data, i + 1)
                    state = "end"
                elif c == ord("}"):
                    stack.pop()
                    i += 1
                else:
                    raise error(i, "after object key:value pair")
            else:
                if c == ord(","):
                    i += 1
                    state = "value"
                elif c == ord("]"):
                    stack.pop()
                    i += 1
                else:
                    raise error(i, "after array element")
    except _Error as e:
        return str(e)


def _string(data: bytes, i: int) -> int:
    """Past the closing quote of a string whose opening quote is just before ``i``."""
    n = len(data)
    while True:
        i = _STRING_RUN.match(data, i).end()  # type: ignore[union-attr]  # plain characters, at C speed
        if i == n:
            raise _Error("unexpected end of JSON input")
        c = data[i]
        if c == ord('"'):
            return i + 1
        if c == ord("\\"):
            i += 1
            if i == n or data[i] not in _ESCAPES + b"u":
                raise _Error(f"invalid character {_char_at(data, i)} in string escape code")
            if data[i] == ord("u"):
                for _ in range(4):
                    i += 1
                    if i == n or data[i] not in _HEX:
                        raise _Error(f"invalid character {_char_at(data, i)} in \\u hexadecimal character escape")
        elif c < 0x20:
            raise _Error(f"invalid character {quote_char(c)} in string literal")
        i += 1


def _number(data: bytes, i: int) -> int:
    """Past a number starting at ``i`` (Go's state1/state0/stateDot/stateE...)."""
    n = len(data)

    def need(at: int, context: str) -> None:
        if at == n or data[at] not in _DIGITS:
            raise _Error(f"invalid character {_char_at(data, at)} {context}")

    if data[i] == ord("-"):
        i += 1
        need(i, "in numeric literal")
    if data[i] == ord("0"):
        i += 1
    else:
        while i < n and data[i] in _DIGITS:
            i += 1
    if i < n and data[i] == ord("."):
        i += 1
        need(i, "after decimal point in numeric literal")
        while i < n and data[i] in _DIGITS:
            i += 1
    if i < n and data[i] in b"eE":
        i += 1
        if i < n and data[i] in b"+-":
            i += 1
        need(i, "in exponent of numeric literal")
        while i < n and data[i] in _DIGITS:
            i += 1
    return i


def json_kind(value: Any) -> str:
    """How Go's decoder names a JSON value in a type error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def type_error(value: Any, go_type: str, field: str = "") -> str:
    """Go's ``UnmarshalTypeError``: ``json: cannot unmarshal <kind> into Go value of type <T>``, or
    ``into Go struct field <S.f> of type <T>`` for a field."""
    where = f"Go struct field {field}" if field else "Go value"
    return f"json: cannot unmarshal {json_kind(value)} into {where} of type {go_type}"


class GoBase64Error(ValueError):
    """Go's ``base64.CorruptInputError``."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"illegal base64 data at input byte {offset}")


_URL_ALPHABET = {c: i for i, c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def base64_raw_url_decode(text: str) -> bytes:
    """Go's ``base64.RawURLEncoding.DecodeString``: URL alphabet, no padding, CR and LF skipped,
    errors at Go's offsets."""
    src = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    si = 0
    while si < len(src):
        quantum: list[int] = []
        while len(quantum) < 4:
            if si == len(src):
                if len(quantum) == 1:
                    raise GoBase64Error(si - 1)
                break
            c = src[si]
            si += 1
            if c in (0x0A, 0x0D):
                continue
            if c not in _URL_ALPHABET:
                raise GoBase64Error(si - 1)
            quantum.append(_URL_ALPHABET[c])
        if not quantum:
            break
        bits = 0
        for v in quantum:
            bits = bits << 6 | v
        bits <<= 6 * (4 - len(quantum))
        out += bits.to_bytes(3, "big")[:len(quantum) - 1]
    return bytes(out)
