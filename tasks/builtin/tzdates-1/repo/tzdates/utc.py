"""UTC helpers."""

import datetime as _dt

from tzdates.offsets import FixedOffset

UTC = FixedOffset(0)


def utcnow():
    return _dt.datetime.now(UTC)


def to_utc(dt):
    """Convert an aware datetime to UTC; naive datetimes are rejected."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("to_utc() needs an aware datetime")
    return dt.astimezone(UTC)
