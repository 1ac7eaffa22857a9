"""The JSON error object that a command given `--json` prints on stdout (cli.errors), in a module light enough for
the console script's first lines (cli.entry), where a Ctrl-C or SIGTERM can land before any command read its options:

    {"error": {"type": "usage" | "input" | "interrupted", "message": "...", "exit_code": 2 | 130 | 143}}
"""

from __future__ import annotations

import json


def error_json(kind: str, message: str, exit_code: int) -> str:
    return json.dumps({"error": {"type": kind, "message": message, "exit_code": exit_code}}, indent=2)


def json_in(args: list[str]) -> bool:
    """Whether the command line `args` gives `--json` as an option (after a `--`, words are arguments)."""
    options = args[: args.index("--")] if "--" in args else args
    return "--json" in options
