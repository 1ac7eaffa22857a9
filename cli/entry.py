"""The `nexus-agent` console script: imports the CLI (typer, click, rich: a few tenths of a second) with Ctrl-C held
until that import is done (cli.ctrl_c), then runs it. Pressed that early, Ctrl-C showed Python's KeyboardInterrupt
traceback; now it prints `interrupted` and exits 130, as it does later. This module imports nothing heavy, so a
batch's spawned workers, which import the console script again as their main module, start light too."""

from __future__ import annotations

import sys

from cli.ctrl_c import waiting_for_imports


def main() -> None:
    try:
        with waiting_for_imports():
            from cli.app import main as run
        run()  # its own handling from here (cli.errors), past a first line that a late-raised Ctrl-C might hit
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
