"""Ctrl-C during a chat turn: the first press stops the turn after the current step, a second one stops it now.

Signal handlers belong to the main thread: a runner driven from another thread (a Python caller's worker) keeps
the process's handler, and its turns end by their own limits only.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


class StopTurn(KeyboardInterrupt):
    """Ends the current turn at a step boundary (the session is consistent: nothing to roll back)."""


class TurnInterrupt:
    """Ctrl-C during a turn: the first press stops the turn after the current step, a second one stops it now."""

    def __init__(self, notify) -> None:
        self.notify = notify  # prints a one-line note
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> TurnInterrupt:
        self.requested = False
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.notify("stopping after the current step (Ctrl-C again to stop now)")

    def check(self) -> None:
        """Called between steps: end the turn there when a stop was asked for."""
        if self.requested:
            raise StopTurn
