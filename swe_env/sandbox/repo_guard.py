"""What a chat's step may not leave in the user's repo: setuid/setgid files, and git repositories of its own.

The user's own git runs in the repo after the session, as the user (root, often). The repo's .git is bound
read-only into the sandbox (bwrap.py), and so is every other `.git` the repo held when the chat opened (a vendored
repository, a submodule's link file): config, includes and hooks planted there would run in the user's git (issue
62 item 7). A `.git` the agent makes elsewhere (`git init sub`, a link file naming another gitdir) would run the
same way once the user works in that folder, so after every step it is removed and the step's output says so.
Files never keep setuid/setgid bits (the seccomp filter refuses them; this is the second line).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from swe_env.sandbox.host_user import SETID, walk

GIT = ".git"


def git_entries(repo: Path) -> set[str]:
    """The `.git` entries below the repo's top (relative paths; symlinks not followed), found when a chat opens."""
    return {str(p.relative_to(repo)) for p in walk(repo) if p.name == GIT and p.parent != repo}


def check_after_step(repo: Path, known: set[str]) -> list[str]:
    """Clear setuid/setgid bits and remove the `.git` entries the step made; one note per removed entry."""
    notes, planted = [], []
    for path in walk(repo):
        try:
            st = path.lstat()
        except OSError:
            continue
        if path.name == GIT and path.parent != repo and str(path.relative_to(repo)) not in known:
            planted.append(path)
        elif stat.S_ISREG(st.st_mode) and st.st_mode & SETID:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~SETID, follow_symlinks=False)
    for path in planted:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        rel = path.relative_to(repo)
        notes.append(f"removed {rel}: a git repository made in your repo would run its config and hooks in your git")
    return notes
