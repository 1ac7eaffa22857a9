import pytest

from csvlite import CSVError, Dialect, read_rows


def test_simple_rows():
    assert read_rows("a,b,c\r\n1,2,3\r\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_empty_fields():
    assert read_rows("a,,c\n,,\n") == [["a", "", "c"], ["", "", ""]]


def test_quoted_delimiter():
    assert read_rows('name,city\n"Smith, J",Oslo\n') == [["name", "city"], ["Smith, J", "Oslo"]]


def test_quoted_newline():
    assert read_rows('id,note\n1,"two\nlines"\n2,x\n') == [["id", "note"], ["1", "two\nlines"], ["2", "x"]]


def test_last_line_without_terminator():
    assert read_rows("a,b\n1,2") == [["a", "b"], ["1", "2"]]


def test_semicolon_dialect():
    assert read_rows("a;b\n1;2\n", dialect=Dialect(delimiter=";")) == [["a", "b"], ["1", "2"]]


def test_unterminated_quote_raises():
    with pytest.raises(CSVError) as info:
        read_rows('a,"b\n')
    assert info.value.line == 1


def test_strict_rejects_text_after_closing_quote():
    with pytest.raises(CSVError):
        read_rows('"a"b,c\n', strict=True)
