"""One run per folder: an exclusive `flock` on a lock file inside a run or eval folder, held while the run writes
there. Two runs on one folder interleaved their trajectories (solve) or ran the same task twice (eval); the second
one is now refused at once, naming the holder's pid. The kernel drops the lock when its holder exits, a SIGKILL
included, so a stale lock file never blocks the next run.

    with hold_folder(Path("runs/x")):   # RunError at once when another process holds it
        ...
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import RunError

LOCK_FILE = ".nexus-lock"  # hidden: the folder's readers (calibrate, show, an eval's resume) never see it
_held: dict[Path, int] = {}  # folders this process holds -> nesting depth (a solve's CLI, then its run_task)


class FolderBusy(RunError):
    """Another process holds the folder; `holder`: its pid, as its lock file says."""

    def __init__(self, folder: Path, holder: str) -> None:
        super().__init__(f"{folder} is in use by another run (pid {holder}); wait for it to end or give another --out")
        self.holder = holder


@contextmanager
def hold_folder(folder: Path) -> Iterator[None]:
    """Hold `folder` (created when missing) for this process until the block ends; nested holds of the same folder
    in one process share the lock. Raises FolderBusy (a RunError) naming the holder when another process holds it."""
    key = folder.resolve()
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd = _lock(folder)
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        os.close(fd)  # releases the flock


def _lock(folder: Path) -> int:
    """The open, locked lock file of `folder`, with this process's pid written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RunError(f"{folder}: cannot use it as a run folder ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise FolderBusy(folder, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def held_elsewhere(folder: Path) -> str | None:
    """The pid (as its lock file says) of another process that holds `folder` now; None when none does."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)  # releases the flock when it was taken
    return None


def _holder(fd: int) -> str:
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
