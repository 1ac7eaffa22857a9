#!/usr/bin/env python3
"""finish: submit the work and end the episode (an R2E-Gym-style agent tool).

`--command submit` (the only command) prints the submission marker line, then `--result` (may be empty), and
exits 0. The environment, not this tool, collects the patch (`git add -A && git diff --cached`).
Errors print one "ERROR: ..." line and exit with code 1. Standard library only; runs under any python3 >= 3.8.
"""

from __future__ import annotations

import argparse
import sys

MARKER = "<<<NEXUS_SUBMITTED>>>"  # the agent runtime looks for this line to know the episode ended


class FinishError(Exception):
    """A mistake in the call; printed as one ERROR line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit 2 with a usage dump
        raise FinishError(message)


def emit(text: str) -> None:
    """Print as UTF-8 whatever the locale of the image is."""
    sys.stdout.buffer.write((text + "\n").encode("utf-8", errors="replace"))
    sys.stdout.flush()


def main(argv: list | None = None) -> int:
    parser = _Parser(prog="finish", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("command", nargs="?", help="submit")
    parser.add_argument("--command", dest="command_opt", help="submit (as an option)")
    parser.add_argument("--result", default="", help="a short summary of the work (optional)")
    try:
        args = parser.parse_args(argv)
        if args.command is not None and args.command_opt is not None:
            raise FinishError(f"unrecognized arguments: {args.command}")
        command = args.command_opt or args.command or "submit"
        if command != "submit":
            raise FinishError(f"Unrecognized command {command!r}; the only allowed value is 'submit'.")
    except FinishError as e:
        emit(f"ERROR: {e}")
        return 1
    emit(MARKER)
    if args.result:
        emit(args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
