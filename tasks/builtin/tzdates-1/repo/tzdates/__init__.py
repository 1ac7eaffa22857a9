"""tzdates: strict ISO 8601 / RFC 3339 timestamps with UTC offsets."""

from tzdates.formatting import format_date, format_iso
from tzdates.offsets import FixedOffset, format_offset, parse_offset
from tzdates.parsing import ParseError, parse_date, parse_iso
from tzdates.utc import UTC, to_utc, utcnow

__all__ = [
    "UTC",
    "FixedOffset",
    "ParseError",
    "format_date",
    "format_iso",
    "format_offset",
    "parse_date",
    "parse_iso",
    "parse_offset",
    "to_utc",
    "utcnow",
]
__version__ = "0.9.2"
