"""Render an invoice for people (plain text) and for the API (a dict)."""

from invoicer.money import format_money

WIDTH = 60


def _row(left, right, width=WIDTH):
    return f"{left}{right:>{width - len(left)}}"


def _percent(rate):
    return f"{(rate * 100).normalize():f}%"


def render_invoice(invoice):
    """A fixed-width text invoice, as sent in e-mails."""
    cur = invoice.currency
    totals = invoice.totals()
    out = [f"Invoice {invoice.number}", f"Customer: {invoice.customer}", "-" * WIDTH]
    for line in invoice.lines:
        left = f"{line.quantity} x {line.description} @ {format_money(line.unit_price, cur)}"
        out.append(_row(left, format_money(line.net, cur)))
    out.append("-" * WIDTH)
    out.append(_row("Subtotal", format_money(totals.subtotal, cur)))
    for discount in invoice.discounts:
        out.append(_row(f"Discount ({discount.label})", format_money(-discount.value_for(totals.subtotal), cur)))
    for rate, amount in sorted(totals.tax_by_rate.items()):
        out.append(_row(f"VAT {_percent(rate)}", format_money(amount, cur)))
    out.append(_row("Total", format_money(totals.total, cur)))
    return "\n".join(out) + "\n"


def invoice_as_dict(invoice):
    """The JSON representation used by the API (amounts as strings)."""
    totals = invoice.totals()
    return {
        "number": invoice.number,
        "customer": invoice.customer,
        "currency": invoice.currency,
        "lines": [
            {
                "description": line.description,
                "quantity": line.quantity,
                "unit_price": str(line.unit_price),
                "net": str(line.net),
                "tax_rate": str(line.tax_rate),
            }
            for line in invoice.lines
        ],
        "subtotal": str(totals.subtotal),
        "discount": str(totals.discount),
        "tax": str(totals.tax),
        "total": str(totals.total),
    }
