"""csvkit-lite: a small RFC 4180 CSV reader and writer."""

from csvlite.dialect import Dialect, sniff
from csvlite.reader import CSVError, Reader, read_rows
from csvlite.records import DictReader, read_records
from csvlite.writer import Writer, format_row, write_rows

__all__ = [
    "CSVError",
    "Dialect",
    "DictReader",
    "Reader",
    "Writer",
    "format_row",
    "read_records",
    "read_rows",
    "sniff",
    "write_rows",
]
__version__ = "0.4.1"
