"""Invoices: line items, discounts and the totals computed from them."""

from dataclasses import dataclass, field
from decimal import Decimal

from invoicer.money import round_money, to_decimal


@dataclass
class LineItem:
    description: str
    quantity: int = 1
    unit_price: Decimal = Decimal("0")
    tax_rate: Decimal = Decimal("0")

    def __post_init__(self):
        self.unit_price = to_decimal(self.unit_price)
        self.tax_rate = to_decimal(self.tax_rate)
        if self.quantity <= 0:
            raise ValueError("quantity must be positive")
        if not Decimal("0") <= self.tax_rate < Decimal("1"):
            raise ValueError("tax_rate is a fraction, e.g. 0.19 for 19%")

    @property
    def net(self):
        """quantity x unit price, rounded to the cent."""
        return round_money(self.unit_price * self.quantity)


@dataclass
class Discount:
    """A percentage (0.10 = 10 %) or a fixed amount off the subtotal."""

    label: str
    percent: Decimal = None
    amount: Decimal = None

    def value_for(self, subtotal):
        if self.percent is not None:
            return round_money(subtotal * to_decimal(self.percent))
        return min(round_money(self.amount), subtotal)


@dataclass
class Totals:
    subtotal: Decimal
    discount: Decimal
    tax: Decimal
    total: Decimal
    tax_by_rate: dict


@dataclass
class Invoice:
    number: str
    customer: str = ""
    currency: str = "EUR"
    lines: list = field(default_factory=list)
    discounts: list = field(default_factory=list)

    def add(self, line):
        self.lines.append(line)
        return self

    def add_discount(self, discount):
        self.discounts.append(discount)
        return self

    def _discount_factor(self, subtotal, discount):
        if not subtotal:
            return Decimal("1")
        return (subtotal - discount) / subtotal

    def totals(self):
        subtotal = sum((line.net for line in self.lines), Decimal("0.00"))
        discount = sum((d.value_for(subtotal) for d in self.discounts), Decimal("0.00"))
        factor = self._discount_factor(subtotal, discount)
        tax_by_rate = {}
        for line in self.lines:
            line_tax = round_money(line.net * factor * line.tax_rate)
            tax_by_rate[line.tax_rate] = tax_by_rate.get(line.tax_rate, Decimal("0.00")) + line_tax
        tax = sum(tax_by_rate.values(), Decimal("0.00"))
        return Totals(subtotal, discount, tax, subtotal - discount + tax, tax_by_rate)
