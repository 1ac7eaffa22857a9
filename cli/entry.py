"""The `nexus-agent` console script: imports the CLI (typer, click, rich: a few tenths of a second) with Ctrl-C and
SIGTERM held until that import is done (cli.ctrl_c), then runs it. Pressed that early, Ctrl-C showed Python's
KeyboardInterrupt traceback; now it prints `interrupted` and exits 130 (SIGTERM: `terminated`, 143), as it does later,
and under `--json` also the JSON error object. This module imports nothing heavy, so a batch's spawned workers, which
import the console script again as their main module, start light too."""

from __future__ import annotations

import sys

from cli.ctrl_c import waiting_for_imports
from cli.json_errors import error_json, json_in
from pipeline.lifetime import Terminated


def main() -> None:
    try:
        with waiting_for_imports():
            from cli.app import main as run
        run()  # its own handling from here (cli.errors), past a first line that a late-raised Ctrl-C might hit
    except KeyboardInterrupt as exc:
        message, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        sys.stderr.write(message + "\n")
        if json_in(sys.argv[1:]):  # no command has read its options yet: the command line says
            sys.stdout.write(error_json("interrupted", message, code) + "\n")
        sys.exit(code)
