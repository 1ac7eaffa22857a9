"""Git on a tree an agent may have written: nothing the repository itself configures gets to run.

A repository's own config can make git run commands: core.fsmonitor, hooks, clean/smudge filters, textconv,
diff.external, core.pager, core.sshCommand, includes of further files, and submodules with configs of their
own. `run_git` runs host-side git against a shadow git dir in a private temp folder: the repository's objects,
refs and index are linked in, but its config is rebuilt from a short list of keys that only describe the
repository (format version, file modes, case and symlink handling), system and global config are off, and the
few settings that could still run something are pinned. Every host-side git call on an agent-writable tree
goes through here; inside a sandbox `SANDBOX_FLAGS` are added too (defence in depth, the sandbox contains
the rest).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# Config keys copied from the repository: they describe it and run nothing.
SAFE_KEYS = {
    "core.repositoryformatversion", "core.filemode", "core.ignorecase", "core.precomposeunicode", "core.symlinks",
    "core.bare", "core.logallrefupdates", "core.autocrlf", "core.eol", "core.safecrlf", "extensions.objectformat",
}  # fmt: skip
# Pinned on every call (after the copied config, so they win).
PINNED = {
    "core.fsmonitor": "false", "core.hooksPath": "/dev/null", "core.pager": "cat", "core.editor": "true",
    "core.sshCommand": "false", "core.askPass": "", "credential.helper": "",
    "diff.ignoreSubmodules": "all", "status.submoduleSummary": "false", "submodule.recurse": "false",
    "protocol.allow": "never", "core.untrackedCache": "false", "core.splitIndex": "false",
}  # fmt: skip
SANDBOX_FLAGS = "-c core.fsmonitor=false -c core.hooksPath=/dev/null -c submodule.recurse=false"
_CLEAN_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat", "GIT_EDITOR": "true", "GIT_OPTIONAL_LOCKS": "0",
}  # fmt: skip


class GitError(RuntimeError):
    """Git could not be run on the tree (not a repository, git missing, a timeout)."""


def run_git(
    repo: Path, *args: str, timeout: float = 60.0, dirs: tuple[Path, Path] | None = None
) -> subprocess.CompletedProcess:
    """`git <args>` on the work tree `repo` with none of the repository's executable config honoured. `dirs`: the
    git dir and common dir to use (`git_dirs` as found before the agent could write the tree); default: as the
    tree's `.git` says now."""
    gitdir, common = dirs or git_dirs(repo)
    with tempfile.TemporaryDirectory(prefix="nexus-safegit-") as tmp:
        shadow = Path(tmp) / "git"
        _build_shadow(shadow, gitdir, common)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(_CLEAN_ENV, GIT_DIR=str(shadow), GIT_WORK_TREE=str(repo), HOME=tmp, XDG_CONFIG_HOME=tmp)
        pinned = [a for k, v in PINNED.items() for a in ("-c", f"{k}={v}")]
        try:
            return subprocess.run(
                ["git", *pinned, *args], cwd=repo, env=env, capture_output=True, text=True, errors="replace",
                timeout=timeout,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitError(f"git {' '.join(args)} in {repo}: {exc}") from None


def git_dirs(repo: Path) -> tuple[Path, Path]:
    """The repository's git dir and common dir (they differ in a linked worktree), found without running git. The
    `.git` link and `commondir` files are read as whoever can write the tree left them: any bytes."""
    dot = repo / ".git"
    if dot.is_dir():
        gitdir = dot
    elif dot.is_file():
        text = dot.read_text(errors="replace").strip()
        if not text.startswith("gitdir:"):
            raise GitError(f"{dot} is not a git link")
        gitdir = _resolve(repo, text.removeprefix("gitdir:").strip(), dot)
    else:
        raise GitError(f"{repo} is not a git working copy")
    common_file = gitdir / "commondir"
    if not common_file.is_file():
        return gitdir, gitdir
    return gitdir, _resolve(gitdir, common_file.read_text(errors="replace").strip(), common_file)


def head_left_out(repo: Path) -> bool:
    """Whether the repository's HEAD is a link out of its git dir, which the shadow git dir leaves out (git then
    finds no repository): a reason to name instead of "not a git repository"."""
    try:
        gitdir, _ = git_dirs(repo)
    except (GitError, OSError):
        return False
    head = gitdir / "HEAD"
    return head.is_symlink() and not _inside(head, gitdir)


def _resolve(base: Path, relative: str, source: Path) -> Path:
    try:
        return (base / relative).resolve()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte
        raise GitError(f"{source} does not hold a usable path: {exc}") from None


def _build_shadow(shadow: Path, gitdir: Path, common: Path) -> None:
    """The shadow git dir: the safe config, a copy of HEAD, links to the rest. An entry that is a symlink out of its
    git dir (the agent's link to another repository's index or refs on the host) is left out."""
    shadow.mkdir()
    (shadow / "config").write_text(_safe_config(common / "config"))
    head = gitdir / "HEAD"
    if head.is_file() and _inside(head, gitdir):
        shutil.copyfile(head, shadow / "HEAD")
    for name, base in (("objects", common), ("refs", common), ("packed-refs", common), ("shallow", common),
                       ("info", common), ("index", gitdir)):  # fmt: skip
        if (base / name).exists() and _inside(base / name, base):
            (shadow / name).symlink_to(base / name)


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def _safe_config(path: Path) -> str:
    """The config keys of SAFE_KEYS, read without following includes (`git config --file` does not)."""
    if not path.is_file():
        return ""
    env = {**os.environ, **_CLEAN_ENV}
    res = subprocess.run(
        ["git", "config", "--file", str(path), "--no-includes", "--list", "-z"],
        capture_output=True, env=env, timeout=30,
    )  # fmt: skip
    lines = []
    for entry in res.stdout.split(b"\0"):
        key, _, value = entry.decode("utf-8", errors="replace").partition("\n")
        if key.lower() in {k.lower() for k in SAFE_KEYS}:
            section, _, name = key.rpartition(".")
            lines.append(f"[{section}]\n\t{name} = {_quote(value)}\n")
    return "".join(lines)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' if value else '""'
