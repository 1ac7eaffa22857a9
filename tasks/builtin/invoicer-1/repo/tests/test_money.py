from decimal import Decimal

import pytest

from invoicer import format_money, round_money, to_decimal


def test_to_decimal():
    assert to_decimal("4.15") == Decimal("4.15")
    assert to_decimal(0.1) == Decimal("0.1")
    with pytest.raises(ValueError):
        to_decimal("four")


def test_round_money_simple():
    assert round_money("1.234") == Decimal("1.23")
    assert round_money("1.236") == Decimal("1.24")
    assert round_money("1.135") == Decimal("1.14")


def test_format_money():
    assert format_money("1234.5") == "€1,234.50"
    assert format_money("-3", "USD") == "-$3.00"
    assert format_money("7", "SEK") == "SEK 7.00"
