from csvlite import read_records


def test_records_use_header():
    assert read_records("id,name\n1,Ann\n2,Bo\n") == [{"id": "1", "name": "Ann"}, {"id": "2", "name": "Bo"}]


def test_short_rows_get_restval():
    assert read_records("a,b,c\n1\n") == [{"a": "1", "b": None, "c": None}]


def test_blank_lines_are_skipped():
    assert read_records("a\n1\n\n2\n") == [{"a": "1"}, {"a": "2"}]
