"""The `nexus-agent` console script: imports the CLI (typer, click, rich: a few tenths of a second) with Ctrl-C and
SIGTERM held until that import is done (cli.ctrl_c), then runs it. Pressed that early, Ctrl-C showed Python's
KeyboardInterrupt traceback; now it prints `interrupted` and exits 130 (SIGTERM: `terminated`, 143), as it does later,
and under `--json` also the JSON error object. This module imports nothing heavy, so a batch's spawned workers, which
import the console script again as their main module, start light too."""

from __future__ import annotations

import os
import signal
import sys

from cli.ctrl_c import waiting_for_imports
from cli.json_errors import error_json, json_in, stopped


def main() -> None:
    try:
        with waiting_for_imports():
            from cli.app import main as run
        run()  # its own handling from here (cli.errors), past a first line that a late-raised Ctrl-C might hit
    except KeyboardInterrupt as exc:
        message, code = stopped(exc)
        sys.stderr.write(message + "\n")
        if json_in(sys.argv[1:]):  # no command has read its options yet: the command line says
            sys.stdout.write(error_json("interrupted", message, code) + "\n")
        sys.exit(code)
    finally:
        _exit_at_once_on_a_signal()


def _exit_at_once_on_a_signal() -> None:
    """The command is over and the process only exits now: atexit callbacks (torch's caches, finalizers, a pool's
    joins) run for a moment. A Ctrl-C there printed "Exception ignored in atexit callback" with a traceback; from
    here Ctrl-C or SIGTERM ends the process at once, with its usual exit status and no traceback."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # os._exit skips Python's flush of what is still buffered
        except (OSError, ValueError):
            pass
    for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda *_, status=status: os._exit(status))
