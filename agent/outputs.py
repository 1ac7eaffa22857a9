"""Tool outputs cut for the model, kept whole beside the trajectory: <run folder>/outputs/step-<N>.txt.

These are host files written from what a sandboxed command printed, so nothing is written through a link: the
folder is opened without following a symlink and each file is created new in it (O_EXCL, O_NOFOLLOW), never over an
earlier file. A chat's later episodes (their steps count from 1 again) and a rerun into the same folder get
step-<N>-2.txt and so on. Mode 0644 less the umask, as the trajectory (a plain open) gets it.
"""

from __future__ import annotations

import os
from pathlib import Path

from swe_env.sandbox.limits import StepLimits

OUTPUTS_DIR = "outputs"
MAX_FILE_BYTES = StepLimits.output_bytes  # a sandbox reads no more of one command's output, so this keeps it all
MAX_NAMES = 1000  # step-<N>-<k>.txt names tried before giving up
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def keep_output(folder: Path | None, step: int, text: str) -> str | None:
    """Write `text` to a new file in `folder`/outputs; its path, or None when there is no folder or writing failed
    (a full disk must not end the episode: the model still gets the cut output)."""
    if folder is None:
        return None
    try:
        return str(_write_new(Path(os.path.abspath(folder)) / OUTPUTS_DIR, f"step-{step}", _capped_utf8(text)))
    except OSError:
        return None


def _write_new(folder: Path, stem: str, data: bytes) -> Path:
    folder.mkdir(exist_ok=True)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for k in range(1, MAX_NAMES + 1):
            name = f"{stem}.txt" if k == 1 else f"{stem}-{k}.txt"
            try:
                fd = os.open(name, _NEW_FILE, 0o644, dir_fd=dir_fd)
            except FileExistsError:
                continue
            _fill(fd, data, name, dir_fd)
            return folder / name
        raise FileExistsError(f"{folder}: {stem}.txt to {stem}-{MAX_NAMES}.txt all exist")
    finally:
        os.close(dir_fd)


def _fill(fd: int, data: bytes, name: str, dir_fd: int) -> None:
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError:
        os.unlink(name, dir_fd=dir_fd)  # a partial file would pass for the full output
        raise


def _capped_utf8(text: str) -> bytes:
    """`text` as UTF-8 (a lone surrogate as its backslash escape, as the trajectory writes it), at most
    MAX_FILE_BYTES, cut on a character boundary."""
    data = text[:MAX_FILE_BYTES].encode("utf-8", "backslashreplace")
    if len(data) <= MAX_FILE_BYTES:
        return data
    return data[:MAX_FILE_BYTES].decode("utf-8", "ignore").encode("utf-8")
