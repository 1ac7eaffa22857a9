"""Parse ISO 8601 dates and timestamps (the RFC 3339 profile plus week dates)."""

import datetime as _dt
import re

from tzdates.offsets import FixedOffset

_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_WEEK_RE = re.compile(r"^(\d{4})-?W(\d{2})(?:-?([1-7]))?$")
_TIME_RE = re.compile(
    r"^(?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:[.,](?P<fraction>\d{1,9}))?)?"
    r"(?P<tz>Z|z|[+-]\d{2}(?::?\d{2})?)?$"
)


class ParseError(ValueError):
    pass


def parse_date(text):
    """'2023-06-30' or the ISO week date '2023-W26-5' -> date."""
    text = text.strip()
    match = _DATE_RE.match(text)
    if match:
        try:
            return _dt.date(*map(int, match.groups()))
        except ValueError as exc:
            raise ParseError(f"invalid date {text!r}: {exc}") from None
    match = _WEEK_RE.match(text)
    if match:
        year, week, day = int(match.group(1)), int(match.group(2)), int(match.group(3) or 1)
        try:
            return _dt.date.fromisocalendar(year, week, day)
        except ValueError as exc:
            raise ParseError(f"invalid week date {text!r}: {exc}") from None
    raise ParseError(f"not an ISO 8601 date: {text!r}")


def _parse_tz(text):
    """The offset part of a timestamp -> tzinfo (None when absent)."""
    if text is None:
        return None
    if text in ("Z", "z"):
        return FixedOffset(0)
    sign = -1 if text[0] == "-" else 1
    hours = int(text[1:3])
    return FixedOffset(_dt.timedelta(hours=sign * hours))


def _parse_time(text):
    match = _TIME_RE.match(text)
    if not match:
        raise ParseError(f"not an ISO 8601 time: {text!r}")
    fraction = (match.group("fraction") or "").ljust(6, "0")[:6]
    try:
        return _dt.time(
            int(match.group("hour")),
            int(match.group("minute")),
            int(match.group("second") or 0),
            int(fraction or 0),
            tzinfo=_parse_tz(match.group("tz")),
        )
    except ValueError as exc:
        raise ParseError(f"invalid time {text!r}: {exc}") from None


def parse_iso(text, require_tz=False):
    """'2023-06-30T14:05:09.25+02:00' -> datetime (aware when an offset is given).

    A date alone gives midnight. With require_tz=True a timestamp without an
    offset is rejected.
    """
    text = text.strip()
    date_part, sep, time_part = text.replace(" ", "T", 1).partition("T")
    date = parse_date(date_part)
    if not sep:
        if require_tz:
            raise ParseError(f"timestamp without a UTC offset: {text!r}")
        return _dt.datetime.combine(date, _dt.time())
    time = _parse_time(time_part)
    if require_tz and time.tzinfo is None:
        raise ParseError(f"timestamp without a UTC offset: {text!r}")
    return _dt.datetime.combine(date, time)
