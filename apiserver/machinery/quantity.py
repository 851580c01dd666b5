"""Kubernetes resource quantities (``100Gi``, ``500m``, ``1e3``), parsed exactly as Go's
``resource.ParseQuantity`` does.

Both the grammar and its quirks are reproduced (``"-"``, ``"."`` and ``"Ki"`` are zero, ``"Ei"`` is
a numeric error) so that a value accepted or refused here is accepted or refused by any Go client
reading the same object. The value is returned as an exact :class:`~decimal.Decimal`.
"""

from __future__ import annotations

from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal, InvalidOperation

from apiserver.machinery.golang import MAX_INT64, MIN_INT64

SPLIT_RE = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

ERR_FORMAT_WRONG = f"quantities must match the regular expression '{SPLIT_RE}'"
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_INT64_FACTORS = 18
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity; the message is the one Go returns."""


def parse_quantity(text: str) -> Decimal:
    """Return the exact value of ``text`` or raise :class:`QuantityError`.

    Non-zero values are rounded up (away from zero) to the nano unit and binary-SI values are
    capped at 2^63-1, as Go stores them.
    """
    if text == "":
        raise QuantityError(ERR_FORMAT_WRONG)
    if text == "0":
        return Decimal(0)
    positive, value, num, denom, suffix = _split(text)
    base, exponent = _interpret(suffix)
    binary = base == 2
    if _fits_fast_path(binary, exponent, num, denom):
        amount = Decimal(int(num + denom)).scaleb(-len(denom)) if denom else Decimal(int(num))
        amount = amount if positive else -amount
    else:
        try:
            amount = Decimal(value)
        except InvalidOperation:
            raise QuantityError(ERR_NUMERIC) from None
    return _scale(amount, base, exponent, binary, len(text))


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """Scan sign, digits, fraction and suffix like Go's ``parseQuantityString``."""
    end = len(text)
    pos = 0
    positive = True
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(ERR_FORMAT_WRONG)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int]:
    """Map a suffix to (base, exponent); ``e<int>`` exponents wrap to int32 as in Go."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix]
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        digits = rest[1:] if rest[0] in "+-" else rest
        if not digits or not set(digits) <= _DIGITS:
            raise QuantityError(ERR_SUFFIX)
        parsed = int(rest)
        if not MIN_INT64 <= parsed <= MAX_INT64:
            raise QuantityError(ERR_SUFFIX)
        return 10, (parsed + 2**31) % 2**32 - 2**31
    raise QuantityError(ERR_SUFFIX)


def _fits_fast_path(binary: bool, exponent: int, num: str, denom: str) -> bool:
    """Whether Go takes its int64 path, where a missing numeric part still reads as zero."""
    if binary:
        if denom:
            return False
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        return precision >= 0 and int(num) << exponent <= MAX_INT64
    precision = _MAX_INT64_FACTORS - len(num) - len(denom)
    return precision >= 0 and exponent - len(denom) >= -9


def _scale(amount: Decimal, base: int, exponent: int, binary: bool, digits: int) -> Decimal:
    ctx = Context(prec=digits + 40, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_UP)
    if binary:
        amount = ctx.multiply(amount, Decimal(2**exponent))
    else:
        amount = amount.scaleb(exponent, context=ctx)
    places = amount.as_tuple().exponent
    if amount != 0 and isinstance(places, int) and places < -9:
        amount = amount.quantize(_NANO, rounding=ROUND_UP, context=ctx)
    if binary and abs(amount) > MAX_INT64:
        amount = Decimal(MAX_INT64).copy_sign(amount)
    return amount
