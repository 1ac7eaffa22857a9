"""A chat step's changes, written into the user's repo after the step: the repo's disk budget as a hard limit.

The user's repo lies on the user's disk, where no size can be set, and a file written through an fd and unlinked
while the fd stays open is in no folder any watch walks (issue 62: 184 MiB held against a 40 MiB budget). So under
root a chat's /testbed is an overlay: the repo (its idmapped view) below, an upper layer on the sandbox's
size-limited filesystem (diskfs.py) above, mounted fresh before each step. What the step writes, keeps open or
deletes lands on that filesystem and stops at its size. After the step this module copies the upper layer into
the repo, as the repo's owner: new and changed files and folders (content, mode without setuid/setgid bits, mtime),
symbolic links as links, and deletions (overlay whiteouts, opaque folders). A `.git` the step made is not copied:
its config and hooks would run in the user's git (repo_guard.py); the step's output says so.

Everything here runs as root on paths the agent chose, so nothing is followed: each folder written into must
resolve inside the repo, files are opened with O_NOFOLLOW, folders are removed without following links.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from swe_env.sandbox.host_user import HostUser

OPAQUE = "trusted.overlay.opaque"
GIT = ".git"


def sync_upper(upper: Path, repo: Path, owner: HostUser) -> list[str]:
    """Apply the overlay's upper layer to the repo; returns notes for the step's output."""
    notes: list[str] = []
    _sync_folder(upper, repo, Path("."), owner, notes)
    return notes


def _sync_folder(upper: Path, repo: Path, rel: Path, owner: HostUser, notes: list[str]) -> None:
    try:
        entries = sorted(os.scandir(upper / rel), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        path = rel / entry.name
        if entry.name == GIT:
            notes.append(f"removed {path}: a git repository made in your repo would run its config and hooks in git")
            continue
        try:
            _sync_entry(entry, upper, repo, path, owner, notes)
        except OSError as exc:
            notes.append(f"could not write {path} into your repo: {exc.strerror or exc}")


def _sync_entry(entry: os.DirEntry, upper: Path, repo: Path, path: Path, owner: HostUser, notes: list[str]) -> None:
    st = entry.stat(follow_symlinks=False)
    target = _inside(repo, path)
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout: the step deleted it
        remove_entry(target)
    elif stat.S_ISDIR(st.st_mode):
        if _opaque(entry.path) or not (target.is_dir() and not target.is_symlink()):
            remove_entry(target)  # an opaque folder replaced what was there
        if not target.exists():
            os.mkdir(target)
            os.lchown(target, owner.uid, owner.gid)
        os.chmod(target, stat.S_IMODE(st.st_mode) & 0o1777)
        _sync_folder(upper, repo, path, owner, notes)
    elif stat.S_ISLNK(st.st_mode):
        remove_entry(target)
        os.symlink(os.readlink(entry.path), target)
        os.lchown(target, owner.uid, owner.gid)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(entry.path, target, st, owner)


def _inside(repo: Path, rel: Path) -> Path:
    """repo/rel, after checking its folder resolves inside the repo (no link planted above it)."""
    target = repo / rel
    if not Path(os.path.realpath(target.parent)).is_relative_to(os.path.realpath(repo)):
        raise OSError(errno.EACCES, "a symbolic link above it leaves the repo")
    return target


def remove_entry(target: Path) -> None:
    """Remove what is at `target` (a file, a link, or a whole folder), never following a link; nothing if absent."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(target)  # never follows symlinks
    else:
        os.unlink(target)


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _copy_file(src: str, target: Path, st: os.stat_result, owner: HostUser) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.is_symlink():
        target.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(src, "rb") as fin, os.fdopen(os.open(target, flags, 0o600), "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        os.fchown(fout.fileno(), owner.uid, owner.gid)
        os.fchmod(fout.fileno(), stat.S_IMODE(st.st_mode) & 0o777)
        fout.flush()
        os.utime(fout.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
