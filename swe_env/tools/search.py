#!/usr/bin/env python3
"""search: find a plain-text term in a directory or a file (an R2E-Gym-style agent tool).

* `--path` a directory (default: the current one): every non-hidden text file below it, hidden directories and
  binary files skipped; prints each matching file with its number of matching lines. More than 100 matching files:
  only a note asking to narrow the search.
* `--path` a file: its matching lines as `NUMBER:LINE` (at most 200, then a note).
The term is matched literally (no regular expressions), case-sensitively. Errors print one "ERROR: ..." line and
exit with code 1. Standard library only; runs under any python3 >= 3.8.
"""

from __future__ import annotations

import argparse
import os
import sys

MAX_FILES = 100  # matching files listed for a directory search
MAX_LINES = 200  # matching lines listed for a file search
BINARY_PROBE = 8192  # bytes read to decide whether a file is binary


class SearchError(Exception):
    """A mistake in the call; printed as one ERROR line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit 2 with a usage dump
        raise SearchError(message)


def emit(text: str) -> None:
    """Print as UTF-8 whatever the locale of the image is."""
    sys.stdout.buffer.write((text + "\n").encode("utf-8", errors="replace"))
    sys.stdout.flush()


def text_lines(path: str) -> list | None:
    """The lines of a text file, or None for a binary or unreadable one."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:BINARY_PROBE]:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


def count_matches(directory: str, term: str) -> dict:
    """{file path: number of lines containing `term`} over the non-hidden text files below `directory`."""
    counts = {}
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = os.path.join(root, name)
            lines = text_lines(path) if os.path.isfile(path) else None
            hits = sum(1 for line in lines if term in line) if lines else 0
            if hits:
                counts[path] = hits
    return counts


def shown_path(path: str) -> str:
    """`path` relative to the current directory ("./x/y.py") when it lies below it, else absolute."""
    rel = os.path.relpath(path, os.getcwd())
    return path if rel.startswith("..") else "./" + rel


def search_directory(directory: str, term: str) -> str:
    counts = count_matches(directory, term)
    if not counts:
        return f'No matches found for "{term}" in {directory}'
    if len(counts) > MAX_FILES:
        return (
            f'More than {MAX_FILES} files matched for "{term}" in {directory} ({len(counts)} files). '
            "Please narrow your search."
        )
    lines = [f'Found {sum(counts.values())} matches for "{term}" in {directory}:']
    lines += [f"{shown_path(path)} ({hits} matches)" for path, hits in counts.items()]
    lines.append(f'End of matches for "{term}" in {directory}')
    return "\n".join(lines)


def search_file(path: str, term: str) -> str:
    lines = text_lines(path)
    if lines is None:
        raise SearchError(f"{path} is a binary or unreadable file.")
    hits = [f"{number}:{line}" for number, line in enumerate(lines, 1) if term in line]
    if not hits:
        return f'No matches found for "{term}" in {path}'
    out = [f'Matches for "{term}" in {path}:'] + hits[:MAX_LINES]
    if len(hits) > MAX_LINES:
        out.append(f"[{len(hits) - MAX_LINES} more matching lines not shown. Please narrow your search.]")
    return "\n".join(out)


def run(argv: list | None) -> str:
    parser = _Parser(prog="search", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--search_term", help="the text to look for")
    parser.add_argument("--path", default=".", help="a directory or file (default: the current directory)")
    args = parser.parse_args(argv)
    if not args.search_term:
        raise SearchError("Parameter `search_term` is required and must not be empty.")
    path = os.path.realpath(args.path or ".")
    if os.path.isdir(path):
        return search_directory(path, args.search_term)
    if os.path.isfile(path):
        return search_file(path, args.search_term)
    raise SearchError(f"The path {args.path} does not exist. Please provide a valid file or directory.")


def main(argv: list | None = None) -> int:
    try:
        emit(run(argv))
        return 0
    except SearchError as e:
        emit(f"ERROR: {e}")
    except Exception as e:  # the model must see a message, never a traceback
        emit(f"ERROR: search failed: {type(e).__name__}: {e}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
