"""The files a run writes into its folder, and the one safe way to write them."""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path

REPORT, PATCH, TRAJECTORY = "report.json", "patch.diff", "trajectory.jsonl"


def safe_name(text: str) -> str:
    """`text` as one file name: letters, digits, '-', '_' and '.' kept, anything else '_'; a leading '.' too, so that
    no name is '.', '..' or hidden."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    return "_" + name[1:] if name.startswith(".") else name or "_"


def new_run_folder(root: Path, name: str) -> Path:
    """A new, empty folder `root/<name>-<date>-<time>-<4 hex>`, made here and never an existing one: two runs started
    in the same second once shared a folder named by the second alone."""
    root.mkdir(parents=True, exist_ok=True)
    while True:
        folder = root / f"{safe_name(name)}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder


def check_run_folder(out: Path) -> None:
    """Refuse, before a run starts, an --out that is a file or a folder holding files no run wrote: a run removes
    and rewrites its report, patch and trajectory there, so another tool's files of those names would be lost. A
    missing or empty folder, or an earlier run's, is fine (that run is redone)."""
    from pipeline.errors import RunError
    from pipeline.folder_lock import LOCK_FILE

    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} is a file, not a folder; give a folder (it is created when missing)")
    if not out.is_dir():
        return
    ours = {REPORT, PATCH, TRAJECTORY, LOCK_FILE}
    others = sorted(p.name for p in out.iterdir() if p.name not in ours and not _temp_of_ours(p.name))
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise RunError(
            f"--out {out} is not empty and is not a run folder (it holds {shown}): a run rewrites {REPORT}, {PATCH} "
            f"and {TRAJECTORY} there; use an empty or new --out"
        )


def _temp_of_ours(name: str) -> bool:
    """Whether `name` is a temp file atomic_write left behind for one of a run's files (a run killed mid-write)."""
    return any(name.startswith(f".{f}.") and name.endswith(".tmp") for f in (REPORT, PATCH, TRAJECTORY))


def check_writable(path: Path, option: str, give: str) -> None:
    """Refuse (RunError, one line) before any work an `option` file that could not be written: a folder (`give`
    says what to give instead), or a place where no new file can be made. Its folder is created when missing."""
    from pipeline.errors import RunError

    if path.is_dir():
        raise RunError(f"{option} {path} is a folder; give {give}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path.parent).close()  # where atomic_write writes first
    except OSError as exc:
        raise RunError(f"{option} {path}: cannot write a file there ({exc.strerror or exc})") from None


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same folder and os.replace (never a half-written file); the
    file gets the mode of any file the process creates (0644 under the usual umask), not the temp file's 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    """The process's umask (read by setting it, then setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
