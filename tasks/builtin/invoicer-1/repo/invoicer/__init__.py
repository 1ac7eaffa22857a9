"""invoicer: invoices from line items, rendered as text or JSON."""

from invoicer.ledger import Discount, Invoice, LineItem, Totals
from invoicer.money import format_money, round_money, to_decimal
from invoicer.report import invoice_as_dict, render_invoice

__all__ = [
    "Discount",
    "Invoice",
    "LineItem",
    "Totals",
    "format_money",
    "invoice_as_dict",
    "render_invoice",
    "round_money",
    "to_decimal",
]
__version__ = "1.3.0"
