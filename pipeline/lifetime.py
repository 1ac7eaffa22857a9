"""How a run's processes end: SIGTERM unwinds as Ctrl-C does (`Terminated`), and worker processes do not outlive the
process that started them (a batch killed with SIGKILL included)."""

from __future__ import annotations

import ctypes
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be (cli.ctrl_c), so that it unwinds the same way: the trajectory gets its
    footer, a chat turn is rolled back to its last complete step, a batch stops its workers, sandboxes close. Code
    where Ctrl-C only skips something (a prompt, a profile's learning) lets this one through: the command exits 143."""


@contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Ctrl-C or SIGTERM in the block is raised when it ends (main thread only): for starting a batch's manager and
    workers, which, cut off halfway, printed the tracebacks of children whose parent stopped listening (a manager's
    BrokenPipeError, a worker's EOFError)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: pressed.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signal.SIGTERM in pressed:
        raise Terminated
    if pressed:
        raise KeyboardInterrupt


def start_worker(tmpdir: str) -> None:
    """A batch worker's or its manager's start: it dies with the parent (`die_with_parent`), and Ctrl-C in the
    terminal (which reaches the whole process group) is left to the parent, which stops the workers; no worker prints
    a traceback. A handler, not SIG_IGN: the commands a worker runs get the default again. It lives in this light
    module so that a spawned worker sets it before it imports torch and the rest: pressed during those imports, a
    Ctrl-C broke them off with a traceback of its own."""
    signal.signal(signal.SIGINT, lambda *_: None)
    die_with_parent(tmpdir)


def die_with_parent(tmpdir: str | None = None) -> None:
    """Initializer of a pool or manager process: SIGKILL when the parent dies, and a watchdog where prctl is missing.

    `tmpdir`: the batch's own temp folder, used for everything this process puts in a temp dir (multiprocessing's
    pymp-* folders, sandbox workspaces), so that the batch's start-up sweep finds it all in one place.
    """
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent or parent == 1:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    if tmpdir:
        os.environ["TMPDIR"] = tmpdir
        tempfile.tempdir = tmpdir


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)
