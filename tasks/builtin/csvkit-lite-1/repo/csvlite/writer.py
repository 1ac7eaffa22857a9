"""Write rows as CSV, quoting only the fields that need it."""

import io

from csvlite.dialect import EXCEL


def _needs_quotes(value, dialect):
    return (
        value == ""
        or value[0] == " "
        or value[-1] == " "
        or any(ch in value for ch in (dialect.delimiter, dialect.quotechar, "\r", "\n"))
    )


def format_field(value, dialect=EXCEL):
    """One field as it appears in the file."""
    if value is None:
        return ""
    value = str(value)
    if not _needs_quotes(value, dialect):
        return value
    q = dialect.quotechar
    return q + value.replace(q, q + q) + q


def format_row(row, dialect=EXCEL):
    """One record, terminated by the dialect's line terminator."""
    return dialect.delimiter.join(format_field(v, dialect) for v in row) + dialect.lineterminator


class Writer:
    def __init__(self, stream, dialect=EXCEL):
        self.stream = stream
        self.dialect = dialect
        self.rows_written = 0

    def writerow(self, row):
        self.stream.write(format_row(row, self.dialect))
        self.rows_written += 1

    def writerows(self, rows):
        for row in rows:
            self.writerow(row)


def write_rows(rows, dialect=EXCEL):
    """Serialise rows to a string."""
    out = io.StringIO()
    Writer(out, dialect).writerows(rows)
    return out.getvalue()
