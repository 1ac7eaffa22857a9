from csvlite import Dialect, format_row, write_rows


def test_plain_row():
    assert format_row(["a", 1, None]) == "a,1,\r\n"


def test_quotes_fields_with_delimiter():
    assert format_row(["Smith, J", "Oslo"]) == '"Smith, J",Oslo\r\n'


def test_doubles_quote_characters():
    assert format_row(['say "hi"']) == '"say ""hi"""\r\n'


def test_empty_string_is_quoted():
    assert format_row(["", "x"]) == '"",x\r\n'


def test_write_rows_with_dialect():
    assert write_rows([["a", "b"]], Dialect(delimiter="|", lineterminator="\n")) == "a|b\n"
