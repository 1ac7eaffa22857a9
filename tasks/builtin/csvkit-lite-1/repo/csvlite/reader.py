"""A streaming CSV reader (RFC 4180).

The reader is a small state machine fed one character at a time, so a
quoted field may contain delimiters, quote characters (written twice) and
line breaks.
"""

from csvlite.dialect import EXCEL

START_FIELD = "start_field"
IN_FIELD = "in_field"
IN_QUOTED = "in_quoted"
QUOTE_IN_QUOTED = "quote_in_quoted"


class CSVError(ValueError):
    """Raised for malformed input; carries the 1-based line number."""

    def __init__(self, message, line):
        super().__init__(f"line {line}: {message}")
        self.line = line


class Reader:
    """Iterate over the rows (lists of strings) of a CSV text stream."""

    def __init__(self, lines, dialect=EXCEL, strict=False):
        self._lines = iter(lines)
        self.dialect = dialect
        self.strict = strict
        self.line_num = 0

    def __iter__(self):
        return self

    def __next__(self):
        row, field = [], []
        state = START_FIELD
        while True:
            try:
                line = next(self._lines)
            except StopIteration:
                if state == START_FIELD and not row:
                    raise
                if state == IN_QUOTED:
                    raise CSVError("unexpected end of data inside a quoted field", self.line_num) from None
                row.append("".join(field))
                return row
            self.line_num += 1
            state = self._feed(line, row, field, state)
            if state is None:
                return row

    def _feed(self, line, row, field, state):
        """Consume one physical line; return None when the record is complete."""
        d = self.dialect
        for ch in line:
            if state == START_FIELD:
                if ch == d.quotechar:
                    state = IN_QUOTED
                elif ch == d.delimiter:
                    row.append("")
                elif ch in "\r\n":
                    row.append("")
                    return None
                elif ch == " " and d.skip_initial_space:
                    continue
                else:
                    field.append(ch)
                    state = IN_FIELD
            elif state == IN_FIELD:
                if ch == d.delimiter:
                    row.append("".join(field))
                    field.clear()
                    state = START_FIELD
                elif ch in "\r\n":
                    row.append("".join(field))
                    return None
                elif ch == d.quotechar and self.strict:
                    raise CSVError(f"{d.quotechar!r} inside an unquoted field", self.line_num)
                else:
                    field.append(ch)
            elif state == IN_QUOTED:
                if ch == d.quotechar:
                    state = QUOTE_IN_QUOTED
                else:
                    field.append(ch)
            elif state == QUOTE_IN_QUOTED:
                if ch == d.quotechar:
                    # a doubled quote inside a quoted field is a literal quote
                    field.append(ch)
                    state = IN_FIELD
                elif ch == d.delimiter:
                    row.append("".join(field))
                    field.clear()
                    state = START_FIELD
                elif ch in "\r\n":
                    row.append("".join(field))
                    return None
                elif self.strict:
                    raise CSVError(f"{ch!r} after a closing quote", self.line_num)
                else:
                    field.append(ch)
                    state = IN_FIELD
        if state == START_FIELD and row:
            row.append("")
            return None
        if state in (IN_FIELD, QUOTE_IN_QUOTED):
            row.append("".join(field))
            return None
        return state


def read_rows(text, dialect=EXCEL, strict=False):
    """Parse a whole CSV document held in a string."""
    return list(Reader(text.splitlines(keepends=True), dialect=dialect, strict=strict))
