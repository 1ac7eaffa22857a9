"""Worker processes that do not outlive the process that started them (a batch killed with SIGKILL included)."""

from __future__ import annotations

import ctypes
import os
import signal
import tempfile
import threading
import time

PR_SET_PDEATHSIG = 1


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
