"""Which files of a chat's repo a turn's snapshot covers (pipeline.chat.snapshot): what git lists (tracked, and
untracked but not ignored) through the safe git, or every file but .git in a folder that is no git repo; and what
git ignores, which a snapshot leaves out."""

from __future__ import annotations

import os
import re
from pathlib import Path

from swe_env.safegit import GitError, run_git


def list_files(repo: Path, dirs: tuple[Path, Path] | None) -> list[str]:
    """The repo's files a snapshot covers: `git ls-files` (tracked + untracked not ignored) through the safe git
    with the git dirs found when the chat opened, or every file but .git when the repo is not a git repo. GitError
    when git cannot be run."""
    if dirs is not None:
        res = run_git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", timeout=120, dirs=dirs)
        if res.returncode == 0:
            return sorted({p for p in res.stdout.split("\0") if p and not _in_git_dir(p)})
    out = []
    for top, folders, files in os.walk(repo):
        folders[:] = [f for f in folders if f != ".git"]
        rel = Path(top).relative_to(repo)
        out += [(rel / f).as_posix() for f in files]
        out += [(rel / f).as_posix() for f in folders if (Path(top) / f).is_symlink()]
    return sorted(out)


def list_ignored(repo: Path, dirs: tuple[Path, Path] | None) -> list[str]:
    """What git ignores in the repo now (`ls-files --others --ignored --directory`: "dir/" for a whole folder); []
    when the repo is not a git repo or git cannot say."""
    if dirs is None:
        return []
    args = ("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
    try:
        res = run_git(repo, *args, timeout=120, dirs=dirs)
    except GitError:
        return []
    return sorted(p for p in res.stdout.split("\0") if p) if res.returncode == 0 else []


def was_ignored(rel: str, ignored: list[str]) -> bool:
    return rel in ignored or rel.startswith(tuple(p for p in ignored if p.endswith("/")))


# control characters (C0, DEL, C1) and bidi controls: a terminal acts on them, and a display that drops them shows one
# file's name as another's ("e\x1b[31mvil" as "evil")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")


def shown_path(rel: str) -> str:
    """`rel` as it is shown to the user: each control character as an escape (`\\x1b`, `\\u202e`)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", rel)


def _in_git_dir(rel: str) -> bool:
    return rel == ".git" or rel.startswith(".git/")
