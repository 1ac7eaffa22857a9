import datetime as dt

from tzdates import FixedOffset, format_date, format_iso


def test_format_date_and_week():
    assert format_date(dt.date(2023, 6, 30)) == "2023-06-30"
    assert format_date(dt.date(2023, 6, 30), week=True) == "2023-W26-5"


def test_format_utc():
    value = dt.datetime(2023, 6, 30, 14, 5, 9, tzinfo=FixedOffset(0))
    assert format_iso(value) == "2023-06-30T14:05:09Z"
    assert format_iso(value, utc_as_z=False) == "2023-06-30T14:05:09+00:00"


def test_format_whole_hour_offsets():
    assert format_iso(dt.datetime(2023, 1, 2, 3, 4, 5, tzinfo=FixedOffset(120))) == "2023-01-02T03:04:05+02:00"
    assert format_iso(dt.datetime(2023, 1, 2, 3, 4, 5, tzinfo=FixedOffset(-480))) == "2023-01-02T03:04:05-08:00"


def test_format_naive_and_milliseconds():
    value = dt.datetime(2023, 1, 2, 3, 4, 5, 678900)
    assert format_iso(value) == "2023-01-02T03:04:05.678900"
    assert format_iso(value, timespec="milliseconds") == "2023-01-02T03:04:05.678"
