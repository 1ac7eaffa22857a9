from invoicer import Invoice, LineItem, invoice_as_dict, render_invoice


def make_invoice():
    inv = Invoice("INV-2024-0007", customer="ACME GmbH")
    inv.add(LineItem("Widget", quantity=2, unit_price="10.00", tax_rate="0.19"))
    return inv


def test_render_contains_lines_and_totals():
    text = render_invoice(make_invoice())
    assert text.splitlines()[0] == "Invoice INV-2024-0007"
    assert "2 x Widget @ €10.00" in text
    assert text.splitlines()[-1].endswith("€23.80")
    assert "VAT 19%" in text


def test_rows_are_fixed_width():
    for line in render_invoice(make_invoice()).splitlines()[3:]:
        if not line.startswith("-"):
            assert len(line) == 60


def test_invoice_as_dict():
    data = invoice_as_dict(make_invoice())
    assert data["total"] == "23.80"
    assert data["lines"][0]["net"] == "20.00"
