"""Rows as dictionaries keyed by the header row."""

from csvlite.dialect import EXCEL
from csvlite.reader import CSVError, Reader


class DictReader:
    def __init__(self, lines, dialect=EXCEL, fieldnames=None, restval=None):
        self._reader = Reader(lines, dialect=dialect)
        self.restval = restval
        self._fieldnames = fieldnames

    @property
    def fieldnames(self):
        if self._fieldnames is None:
            try:
                self._fieldnames = next(self._reader)
            except StopIteration:
                self._fieldnames = []
        return self._fieldnames

    def __iter__(self):
        return self

    def __next__(self):
        names = self.fieldnames
        row = next(self._reader)
        while row == [""]:  # blank line
            row = next(self._reader)
        if len(row) > len(names):
            raise CSVError(f"{len(row)} fields but the header has {len(names)}", self._reader.line_num)
        values = row + [self.restval] * (len(names) - len(row))
        return dict(zip(names, values))


def read_records(text, dialect=EXCEL):
    return list(DictReader(text.splitlines(keepends=True), dialect=dialect))
