"""parse_quantity accepts exactly what Go's resource.ParseQuantity accepts, with the same values."""

from decimal import Decimal

import pytest

from apiserver.machinery.quantity import (
    ERR_FORMAT_WRONG,
    ERR_NUMERIC,
    ERR_SUFFIX,
    QuantityError,
    parse_quantity,
)


@pytest.mark.parametrize(("text", "value"), [
    ("0", "0"),
    ("10", "10"),
    ("+10", "10"),
    ("-10", "-10"),
    ("1.5", "1.5"),
    ("1.", "1"),
    (".5", "0.5"),
    ("007", "7"),
    ("500m", "0.5"),
    ("100u", "0.0001"),
    ("3n", "0.000000003"),
    ("2k", "2000"),
    ("1M", "1000000"),
    ("1G", "1000000000"),
    ("1T", "1e12"),
    ("1P", "1e15"),
    ("1E", "1e18"),
    ("1Ki", "1024"),
    ("100Gi", "107374182400"),
    ("1.5Gi", "1610612736"),
    ("1Ti", str(2**40)),
    ("1Pi", str(2**50)),
    ("1Ei", str(2**60)),
    ("1e3", "1000"),
    ("1E3", "1000"),
    ("12e+3", "12000"),
    ("5e-3", "0.005"),
    ("1e30", "1e30"),
])
def test_every_suffix_form_parses_to_its_exact_value(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["-", "+", ".", "Ki", "m", "00"])
def test_go_quirks_that_read_as_zero_are_kept(text: str) -> None:
    assert parse_quantity(text) == 0


def test_values_finer_than_a_nano_unit_round_up_away_from_zero() -> None:
    assert parse_quantity("0.1n") == Decimal("1e-9")
    assert parse_quantity("-1.5n") == Decimal("-2e-9")
    assert parse_quantity("1e-20") == Decimal("1e-9")


def test_binary_si_values_are_capped_at_the_int64_maximum() -> None:
    assert parse_quantity("99999999999999999999Ei") == 2**63 - 1


@pytest.mark.parametrize("text", ["", "abc", "1.5.5", " 1", "1 ", "1e1.5", "0x10", "1Gi ", "10%", "１", "1KI"])
def test_malformed_strings_are_reported_with_the_regular_expression(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert str(err.value) == ERR_FORMAT_WRONG
    assert ERR_FORMAT_WRONG == (
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


@pytest.mark.parametrize("text", ["1ki", "1Mk", "1e", "1mi", "1Kii", "1Gi5", "1e+", "1MM", "1in"])
def test_unknown_suffixes_are_reported_as_suffix_errors(text: str) -> None:
    with pytest.raises(QuantityError, match="^" + ERR_SUFFIX + "$"):
        parse_quantity(text)


def test_a_binary_suffix_without_digits_that_needs_the_slow_path_is_a_numeric_error() -> None:
    with pytest.raises(QuantityError, match="^" + ERR_NUMERIC + "$"):
        parse_quantity("Ei")


def test_quantity_errors_are_value_errors() -> None:
    assert issubclass(QuantityError, ValueError)
