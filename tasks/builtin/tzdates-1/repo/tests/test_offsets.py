import datetime as dt

import pytest

from tzdates import FixedOffset, format_offset, parse_offset, to_utc


def test_parse_offset_forms():
    assert parse_offset("+05:30") == dt.timedelta(hours=5, minutes=30)
    assert parse_offset("-0330") == -dt.timedelta(hours=3, minutes=30)
    assert parse_offset("Z") == dt.timedelta(0)


def test_parse_offset_rejects_garbage():
    with pytest.raises(ValueError):
        parse_offset("+5:30")


def test_format_offset():
    assert format_offset(dt.timedelta(hours=5, minutes=45)) == "+05:45"
    assert format_offset(-dt.timedelta(hours=9, minutes=30), colon=False) == "-0930"


def test_to_utc():
    value = dt.datetime(2023, 1, 1, 12, 0, tzinfo=FixedOffset(dt.timedelta(hours=-5)))
    assert to_utc(value) == dt.datetime(2023, 1, 1, 17, 0, tzinfo=FixedOffset(0))
