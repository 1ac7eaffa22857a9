import datetime as dt

import pytest

from tzdates import ParseError, parse_date, parse_iso


def test_parse_date():
    assert parse_date("2023-06-30") == dt.date(2023, 6, 30)


def test_parse_iso_week():
    assert parse_date("2023-W26-5") == dt.date(2023, 6, 30)
    assert parse_date("2023W26") == dt.date(2023, 6, 26)


def test_parse_invalid_date():
    with pytest.raises(ParseError):
        parse_date("2023-02-30")


def test_parse_utc_z():
    value = parse_iso("2023-06-30T14:05:09Z")
    assert value.utcoffset() == dt.timedelta(0)
    assert (value.hour, value.minute, value.second) == (14, 5, 9)


def test_parse_whole_hour_offsets():
    assert parse_iso("2023-06-30T14:05:09+02:00").utcoffset() == dt.timedelta(hours=2)
    assert parse_iso("2023-06-30T14:05:09-0800").utcoffset() == dt.timedelta(hours=-8)
    assert parse_iso("2023-06-30T14:05:09+02").utcoffset() == dt.timedelta(hours=2)


def test_parse_fraction():
    assert parse_iso("2023-06-30T14:05:09.25Z").microsecond == 250000
    assert parse_iso("2023-06-30T14:05:09,123456789Z").microsecond == 123456


def test_parse_naive_and_require_tz():
    assert parse_iso("2023-06-30 14:05").tzinfo is None
    with pytest.raises(ParseError):
        parse_iso("2023-06-30T14:05:09", require_tz=True)


def test_date_only_is_midnight():
    assert parse_iso("2023-06-30") == dt.datetime(2023, 6, 30)
