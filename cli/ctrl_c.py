"""Ctrl-C never lands inside an import: pressed while a module imports, it is raised once that import is done.

Most commands import torch, transformers and numpy lazily, for seconds after they start. A KeyboardInterrupt raised
inside those imports left them half-imported, and what followed was not `interrupted` (exit 130): torch's C init,
importing numpy, swallowed it (the run went on as if no key had been pressed), nanobind turned it into an abort
("terminate called after throwing an instance of 'nanobind::python_error'"), or a later import of the half-imported
package raised another error with its traceback (transformers' ModuleNotFoundError, numpy's "cannot load module
more than once"). `waiting_for_imports()` installs the SIGINT handler that defers it to the end of the outermost
import running (a command's lazy `from pipeline.backends import ...` takes torch and transformers with it: a few
seconds at most); a second Ctrl-C during that import is raised at once, so an import that hangs can still be left.
SIGTERM gets the same handler, and raises `Terminated` (pipeline.lifetime), a KeyboardInterrupt that ends the command
with exit status 143.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from pipeline.lifetime import Terminated

_IMPORTLIB = frozenset({"importlib._bootstrap", "importlib._bootstrap_external"})
POLL_S = 0.02  # how often the watcher looks whether the import is done
NOTE_AFTER_S = 0.5  # a wait longer than this is said on stderr (NOTE), once
NOTE = "{key}: stopping once the libraries being loaded are in ({key} again: at once)\n"


def importing(frame: FrameType | None) -> bool:
    """Whether `frame` runs inside an import: importlib's frames are on its stack (also across C code, such as an
    extension module's init that imports another module)."""
    while frame is not None:
        if frame.f_globals.get("__name__") in _IMPORTLIB:
            return True
        frame = frame.f_back
    return False


class CtrlC:
    """The SIGINT (or SIGTERM) handler: `error` at once, or, arriving during an import, when the import is done (a
    watcher thread sends the signal again then, and says on stderr why a wait takes longer than NOTE_AFTER_S)."""

    def __init__(self, signum: int = signal.SIGINT, error: type[KeyboardInterrupt] = KeyboardInterrupt) -> None:
        self.signum, self.error = signum, error
        self.note = NOTE.format(key="Ctrl-C" if signum == signal.SIGINT else "SIGTERM").encode()
        self.main = threading.main_thread().ident
        self.waiting = False  # a press waits for the running import to end
        self.resent = False  # the next SIGINT is the watcher's, not a key
        self.said = False  # the wait was said (NOTE)
        self.lock = threading.Lock()  # the watcher's resend and the block's end decide apart from each other

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        again = self.waiting and not self.resent  # a second press while the import still runs
        self.resent = False
        if importing(frame) and not again:
            self.waiting = True
            threading.Thread(target=self._resend_when_imported, name="ctrl-c-after-import", daemon=True).start()
            return
        self.waiting = self.said = False
        raise self.error

    def _resend_when_imported(self) -> None:
        start = time.monotonic()
        while self.waiting and importing(sys._current_frames().get(self.main)):
            if not self.said and time.monotonic() - start > NOTE_AFTER_S:
                self.said = True
                os.write(2, self.note)  # unbuffered: the main thread may be writing to sys.stderr
            time.sleep(POLL_S)
        with self.lock:
            if self.waiting:  # not raised meanwhile by a second press, nor at the block's end
                self.resent = True
                signal.pthread_kill(self.main, self.signum)

    def due(self) -> bool:
        """At the block's end: whether a press still waits and no resend is under way (the watcher stands down)."""
        with self.lock:
            due, self.waiting = self.waiting and not self.resent, False
        return due

    def lost(self, unraisable: Any, previous: Callable[[Any], None]) -> None:
        """sys.unraisablehook while this handler is set: the KeyboardInterrupt it raised landed where errors are
        ignored ("Exception ignored in: ...": a finalizer, a callback from C) and the run would go on as if no key
        had been pressed; it is raised again a moment later instead. Anything else goes to the `previous` hook."""
        if type(unraisable.exc_value) is not self.error:  # another's (the other signal's, a chat's StopTurn)
            previous(unraisable)
            return
        self.waiting = True
        threading.Thread(target=self._resend_soon, name="ctrl-c-again", daemon=True).start()

    def _resend_soon(self) -> None:
        time.sleep(POLL_S)  # out of the code that ignored it, first
        self._resend_when_imported()


@contextmanager
def waiting_for_imports() -> Iterator[None]:
    """Ctrl-C or SIGTERM in the block waits for the import it lands in (`CtrlC`), and is raised at the block's end at
    the latest; the previous handlers come back after it.
    Nothing changes for a signal whose handler is not Python's default (SIGINT ignored: a background job; another
    handler), nor off the main thread (where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {
        sig: CtrlC(sig, error)
        for sig, default, error in (
            (signal.SIGINT, signal.default_int_handler, KeyboardInterrupt),
            (signal.SIGTERM, signal.SIG_DFL, Terminated),
        )
        if signal.getsignal(sig) is default
    }
    hook = sys.unraisablehook
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    for handler in handlers.values():  # a chain: each handler takes its own exception and passes on the rest
        sys.unraisablehook = functools.partial(handler.lost, previous=sys.unraisablehook)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = hook
    for handler in handlers.values():
        if handler.due():  # the block ended before the watcher saw the import end: raised here, at the latest
            raise handler.error
