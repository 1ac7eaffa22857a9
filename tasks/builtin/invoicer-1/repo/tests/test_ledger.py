from decimal import Decimal

import pytest

from invoicer import Discount, Invoice, LineItem


def make_invoice():
    inv = Invoice("INV-1", customer="ACME")
    inv.add(LineItem("Widget", quantity=2, unit_price="10.00", tax_rate="0.19"))
    inv.add(LineItem("Book", quantity=1, unit_price="15.00", tax_rate="0.07"))
    return inv


def test_line_net():
    assert LineItem("x", quantity=3, unit_price="0.333").net == Decimal("1.00")


def test_totals():
    totals = make_invoice().totals()
    assert totals.subtotal == Decimal("35.00")
    assert totals.tax_by_rate == {Decimal("0.19"): Decimal("3.80"), Decimal("0.07"): Decimal("1.05")}
    assert totals.tax == Decimal("4.85")
    assert totals.total == Decimal("39.85")


def test_percent_discount_reduces_tax_base():
    inv = make_invoice().add_discount(Discount("loyalty", percent="0.20"))
    totals = inv.totals()
    assert totals.discount == Decimal("7.00")
    assert totals.tax == Decimal("3.88")
    assert totals.total == Decimal("31.88")


def test_fixed_discount_is_capped():
    inv = Invoice("INV-2").add(LineItem("x", unit_price="5")).add_discount(Discount("voucher", amount="20"))
    assert inv.totals().total == Decimal("0.00")


def test_invalid_lines():
    with pytest.raises(ValueError):
        LineItem("x", quantity=0)
    with pytest.raises(ValueError):
        LineItem("x", tax_rate="19")
