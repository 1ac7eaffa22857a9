"""Format dates and datetimes as ISO 8601 text."""


def format_date(date, week=False):
    """'2023-06-30', or the ISO week date '2023-W26-5' with week=True."""
    if week:
        year, weekno, day = date.isocalendar()
        return f"{year:04d}-W{weekno:02d}-{day}"
    return f"{date.year:04d}-{date.month:02d}-{date.day:02d}"


def _format_tz(dt, utc_as_z):
    offset = dt.utcoffset()
    if offset is None:
        return ""
    minutes = int(offset.total_seconds()) // 60
    if minutes == 0 and utc_as_z:
        return "Z"
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:00"


def format_iso(dt, timespec="auto", utc_as_z=True):
    """datetime -> '2023-06-30T14:05:09+02:00'.

    timespec: 'auto' (microseconds only when non-zero), 'seconds' or
    'milliseconds'.  UTC is written as 'Z' unless utc_as_z is False.
    """
    text = f"{format_date(dt)}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if timespec == "milliseconds":
        text += f".{dt.microsecond // 1000:03d}"
    elif timespec == "auto" and dt.microsecond:
        text += f".{dt.microsecond:06d}"
    elif timespec not in ("auto", "seconds"):
        raise ValueError(f"unknown timespec {timespec!r}")
    return text + _format_tz(dt, utc_as_z)
