"""Money helpers: exact decimal amounts, rounding to the cent, formatting."""

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

CENT = Decimal("0.01")
SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "CHF": "CHF "}


def to_decimal(value):
    """Convert an int, str or Decimal to Decimal; floats go through str() to avoid binary noise."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        value = repr(value)
    try:
        return Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"not an amount: {value!r}") from None


def round_money(amount):
    """Round an amount to whole cents (half up: 0.125 -> 0.13)."""
    return to_decimal(amount).quantize(CENT, rounding=ROUND_HALF_EVEN)


def format_money(amount, currency="EUR"):
    """'€1,234.50', '-$3.00'; the amount is rounded to the cent first."""
    amount = round_money(amount)
    sign = "-" if amount < 0 else ""
    symbol = SYMBOLS.get(currency, currency + " ")
    return f"{sign}{symbol}{abs(amount):,.2f}"
