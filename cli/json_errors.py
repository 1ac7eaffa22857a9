"""The JSON error object that a command given `--json` prints on stdout (cli.errors), in a module light enough for
the console script's first lines (cli.entry), where a Ctrl-C or SIGTERM can land before any command read its options:

    {"error": {"type": "usage" | "input" | "interrupted", "message": "...", "exit_code": 2 | 130 | 143}}

and `stopped`, the one reading of whether Ctrl-C or SIGTERM ended a command.
"""

from __future__ import annotations

import json

from pipeline.lifetime import Terminated


def error_json(kind: str, message: str, exit_code: int) -> str:
    return json.dumps({"error": {"type": kind, "message": message, "exit_code": exit_code}}, indent=2)


def json_in(args: list[str]) -> bool:
    """Whether the command line `args` gives `--json` as an option (after a `--`, words are arguments)."""
    options = args[: args.index("--")] if "--" in args else args
    return "--json" in options


def stopped(exc: BaseException | None) -> tuple[str, int]:
    """How Ctrl-C or SIGTERM ended a command, from its exception or one it led to (typer's Exit, eval's message):
    ("terminated", 143) for SIGTERM's `Terminated`, else ("interrupted", 130)."""
    while exc is not None and not isinstance(exc, KeyboardInterrupt):
        exc = exc.__cause__ or exc.__context__
    return ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
