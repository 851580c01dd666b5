"""Go's spelling of values: how kube's messages quote them (``%q``, ``%v``, ``json.Marshal``) and how
Go parses integers (``strconv.ParseInt``), so that every message and every bound is kube's."""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

__all__ = ["MAX_INT64", "MIN_INT64", "byte_len", "go_bad_value", "go_float", "go_json", "go_quote",
           "parse_duration", "parse_int64", "parse_int_error", "parse_uint64"]

MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(s: str) -> str:
    """Render ``s`` like Go's ``%q`` / ``strconv.Quote`` (messages quote bad values that way)."""
    out = ['"']
    for ch in s:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def go_json(value: Any, sort_keys: bool = False) -> str:
    """Render like Go's ``json.Marshal`` (compact, HTML-escaped, ``None`` → ``null``); Go sorts a
    map's keys (``sort_keys``: the value was a map, as a custom resource is)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def go_float(f: float) -> str:
    """Go's ``%v`` for a float64: shortest digits, exponent form when it is below -4 or at least 6."""
    if not math.isfinite(f):
        return "NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf")
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 else "0"
    sign, digit_tuple, exponent = Decimal(repr(f)).normalize().as_tuple()
    digits, neg = "".join(map(str, digit_tuple)), "-" if sign else ""
    point = len(digits) + int(exponent)  # decimal point position within digits
    if not -4 <= point - 1 < 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{mantissa}e{'-' if point < 1 else '+'}{abs(point - 1):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return neg + digits + "0" * (point - len(digits))
    return f"{neg}{digits[:point]}.{digits[point:]}"


def go_bad_value(value: Any) -> str:
    """Render a ``field.Error`` BadValue the way ``ErrorBody`` does (%q, %v or JSON)."""
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    return go_json(value)


def byte_len(s: str) -> int:
    """Go's ``len(string)``: kube's length limits count UTF-8 bytes, not characters."""
    return len(s.encode("utf-8", "surrogatepass"))


_INT = re.compile(r"[+-]?[0-9]+")
_UINT = re.compile(r"[0-9]+")


def parse_int64(s: str) -> int | None:
    """Go's ``strconv.ParseInt(s, 10, 64)``: ASCII digits with an optional sign (no spaces or
    underscores), in int64 range; None where Go answers an error."""
    if not _INT.fullmatch(s):
        return None
    n = int(s)
    return n if MIN_INT64 <= n <= MAX_INT64 else None


def parse_int_error(s: str) -> str:
    """Go's ``strconv.ParseInt`` error for a value :func:`parse_int64` does not take."""
    problem = "value out of range" if _INT.fullmatch(s) else "invalid syntax"
    return f"strconv.ParseInt: parsing {go_quote(s)}: {problem}"


def parse_uint64(s: str, maximum: int = MAX_INT64) -> int | None:
    """Go's ``strconv.ParseUint(s, 10, 64)`` bounded by ``maximum`` (a resourceVersion is an etcd
    revision: a non-negative int64); None where Go answers an error."""
    if not _UINT.fullmatch(s):
        return None
    n = int(s)
    return n if n <= maximum else None


# Go's time.ParseDuration units, in nanoseconds (both micro signs, as Go accepts them).
_DURATION_UNITS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9,
                   "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def parse_duration(s: str) -> int | None:
    """Go's ``time.ParseDuration``: a signed sequence of decimal numbers, each with an optional
    fraction and a unit (``300ms``, ``1.5h``, ``2h45m``; ``0`` alone needs none), in nanoseconds
    within int64; None where Go answers an error."""
    text, negative = s, False
    if text[:1] in ("-", "+"):
        negative, text = text[0] == "-", text[1:]
    if text == "0":
        return 0
    if not text:
        return None
    total = 0
    while text:
        part = _DURATION_PART.match(text)
        whole, fraction, unit = part.group(1), part.group(2), part.group(3)
        if not whole and not fraction:  # "." or a unit with no number
            return None
        scale = _DURATION_UNITS.get(unit)
        if scale is None:  # missing or unknown unit
            return None
        value = int(whole or "0") * scale
        if fraction:
            value += int(int(fraction) * (scale / 10 ** len(fraction)))  # Go adds the fraction as a float64
        total += value
        if total > MAX_INT64 + (1 if negative else 0):
            return None
        text = text[part.end():]
    return -total if negative else total
