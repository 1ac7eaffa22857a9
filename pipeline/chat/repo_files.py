"""Which files of a chat's repo a turn's snapshot covers (pipeline.chat.snapshot): what git lists (tracked, and
untracked but not ignored) through the safe git, or every file but .git in a folder that is no git repo; and what
git ignores, which a snapshot leaves out."""

from __future__ import annotations

import os
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


def _in_git_dir(rel: str) -> bool:
    return rel == ".git" or rel.startswith(".git/")
