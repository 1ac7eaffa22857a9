"""Fixed UTC offsets: the tzinfo used for parsed timestamps, and their text form."""

import datetime as _dt


class FixedOffset(_dt.tzinfo):
    """A tzinfo with a constant offset from UTC (no DST)."""

    def __init__(self, offset):
        if not isinstance(offset, _dt.timedelta):
            offset = _dt.timedelta(minutes=offset)
        if abs(offset) >= _dt.timedelta(hours=24):
            raise ValueError("UTC offset must be strictly between -24h and +24h")
        self._offset = offset

    def utcoffset(self, dt):
        return self._offset

    def dst(self, dt):
        return _dt.timedelta(0)

    def tzname(self, dt):
        return "UTC" if not self._offset else "UTC" + format_offset(self._offset)

    def __eq__(self, other):
        return isinstance(other, FixedOffset) and other._offset == self._offset

    def __hash__(self):
        return hash(self._offset)

    def __repr__(self):
        return f"FixedOffset({format_offset(self._offset)!r})"


def parse_offset(text):
    """'+05:30', '+0530', '+05', '-08:00' or 'Z' -> timedelta."""
    if text in ("Z", "z"):
        return _dt.timedelta(0)
    sign = {"+": 1, "-": -1}.get(text[:1])
    digits = text[1:].replace(":", "")
    if sign is None or len(digits) not in (2, 4) or not digits.isdigit():
        raise ValueError(f"invalid UTC offset: {text!r}")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if minutes >= 60:
        raise ValueError(f"invalid UTC offset minutes: {text!r}")
    return sign * _dt.timedelta(hours=hours, minutes=minutes)


def format_offset(offset, colon=True):
    """timedelta -> '+05:30' (or '+0530' with colon=False)."""
    total = int(offset.total_seconds()) // 60
    sign = "-" if total < 0 else "+"
    hours, minutes = divmod(abs(total), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"
