"""Small JSON records that host root reads and writes beside files a sandbox could have written (an env's stamp).

Every read opens without following a symlink (O_NOFOLLOW), checks that it got a regular file and reads at most
`cap` bytes, so a planted link (to a root-only file, to /dev/zero, to a FIFO) is never followed and never costs more
than the cap. Writes go to a fresh file in the same folder, renamed over the record: the record's folder must be one
no sandbox can write (the env cache's own folder, not an env inside it).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

CAP = 64 << 10  # bytes: a record is a few hundred


def read_record(path: Path, cap: int = CAP) -> dict | None:
    """The record at `path`, or None when it is missing, not a regular file, a symlink, too big or not a JSON
    object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        data = f.read(cap + 1)
    try:
        value = json.loads(data[:cap])
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and len(data) <= cap else None


def write_record(path: Path, value: dict) -> None:
    """Write `value` to `path` atomically, never through whatever is at `path` (the rename replaces a link)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
