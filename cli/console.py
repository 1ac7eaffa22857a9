"""The consoles commands print to. On a terminal, rich as it is; otherwise (a pipe, a file, a log) lines are never
hard-wrapped and tables never cut: `tasks list | cat` showed `nexus-demo__csvkit…` and a summary written to a file
broke a path at column 80, because rich assumes 80 columns when it cannot ask a terminal."""

from __future__ import annotations

import os
import sys

from rich.console import Console

UNLIMITED = 100_000  # columns for output that is not a terminal: tables take their natural width


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that wraps and cuts only for a terminal."""
    out = Console(stderr=stderr)
    if not out.is_terminal:
        out.soft_wrap = True
        out.width = UNLIMITED
    return out


def quiet_progress_bars() -> None:
    """Turn off third-party progress bars (transformers' GGUF conversion, huggingface_hub's downloads, any tqdm)
    when stderr is not a terminal: they redraw with carriage returns, which in a log is noise. Set in the
    environment before those libraries are imported (they read it then), so eval's workers inherit it."""
    if not sys.stderr.isatty():
        for variable in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
            os.environ.setdefault(variable, "1")
