"""Dialects describe how a CSV file is delimited and quoted."""

from collections import Counter
from dataclasses import dataclass

CANDIDATE_DELIMITERS = (",", ";", "\t", "|")


@dataclass(frozen=True)
class Dialect:
    delimiter: str = ","
    quotechar: str = '"'
    lineterminator: str = "\r\n"
    skip_initial_space: bool = False

    def __post_init__(self):
        if len(self.delimiter) != 1:
            raise ValueError("delimiter must be a single character")
        if len(self.quotechar) != 1:
            raise ValueError("quotechar must be a single character")
        if self.delimiter == self.quotechar:
            raise ValueError("delimiter and quotechar must differ")


EXCEL = Dialect()
EXCEL_TAB = Dialect(delimiter="\t")


def sniff(sample, candidates=CANDIDATE_DELIMITERS):
    """Guess the dialect of `sample` (the first few lines of a file).

    The delimiter is the candidate that occurs the same, non-zero number of
    times on the most lines (quoted sections are ignored).
    """
    lines = [line for line in sample.splitlines() if line.strip()][:20]
    if not lines:
        raise ValueError("cannot sniff an empty sample")
    best, best_score = ",", -1
    for delim in candidates:
        counts = Counter(_count_outside_quotes(line, delim) for line in lines)
        count, freq = counts.most_common(1)[0]
        score = freq if count > 0 else 0
        if score > best_score:
            best, best_score = delim, score
    return Dialect(delimiter=best)


def _count_outside_quotes(line, char, quotechar='"'):
    n, quoted = 0, False
    for ch in line:
        if ch == quotechar:
            quoted = not quoted
        elif ch == char and not quoted:
            n += 1
    return n
