"""A git working copy of a task's repository at its base commit (gitpython).

Built-in tasks are recreated from package data with a fixed author, committer and date, so their base commit is
the same SHA everywhere. Other repos come from the repo cache (`--repo-cache DIR` or $NEXUS_REPO_CACHE: mirrors
`owner__name[.git]` or git bundles `owner__name[-*].bundle`, see tasks.mirrors) when it has them, else GitHub.
"""

from __future__ import annotations

import os
from pathlib import Path

import git

from tasks.builtin import builtin_repo_files, is_builtin
from tasks.mirrors import find_source, repo_cache_dir, unpack_bundle
from tasks.schema import Task, TaskError

GITHUB_URL = "https://github.com/{repo}.git"
# Everything that makes a commit's SHA depend on the machine is pinned; user and system git config is ignored.
_DETERMINISTIC_ENV = {
    "GIT_AUTHOR_NAME": "nexus-demo",
    "GIT_AUTHOR_EMAIL": "demo@nexus-agent.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "nexus-demo",
    "GIT_COMMITTER_EMAIL": "demo@nexus-agent.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
BUILTIN_COMMIT_MESSAGE = "Initial commit"
_CACHE_HINT = "put a mirror owner__name or a bundle owner__name.bundle into --repo-cache DIR or $NEXUS_REPO_CACHE"


def prepare_repo(task: Task, dest: Path, repo_cache: Path | None = None) -> Path:
    """Create a git working copy of the task's repo checked out at task.base_commit in `dest`; return `dest`."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise TaskError(f"cannot prepare {task.instance_id}: {dest} exists and is not empty")
    if is_builtin(task):
        sha = create_builtin_repo(task.instance_id, dest)
        if sha != task.base_commit:
            raise TaskError(
                f"built-in task {task.instance_id}: its files give commit {sha}, not the recorded base_commit "
                f"{task.base_commit} (the package data was changed)"
            )
        return dest
    local = find_source(task.repo, repo_cache_dir(repo_cache), task.base_commit)
    source = str(local) if local is not None else GITHUB_URL.format(repo=task.repo)
    if local is not None and local.suffix == ".bundle":
        _unbundle(task, local, dest)
    else:
        _clone(task, source, dest)
    _checkout(task, dest, source)
    return dest


def create_builtin_repo(instance_id: str, dest: Path) -> str:
    """Write a built-in task's files into `dest`, commit them deterministically, and return the commit SHA."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel, content in builtin_repo_files(instance_id).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(0o644)
    cmd = git.Git(dest)
    cmd.execute(["git", "init", "--quiet", "--initial-branch=main"], env=_DETERMINISTIC_ENV)
    cmd.execute(["git", "add", "--all"], env=_DETERMINISTIC_ENV)
    cmd.execute(["git", "commit", "--quiet", "--no-verify", "-m", BUILTIN_COMMIT_MESSAGE], env=_DETERMINISTIC_ENV)
    with git.Repo(dest) as repo:  # closing it ends its `git cat-file` helpers
        return repo.head.commit.hexsha


def _unbundle(task: Task, bundle: Path, dest: Path) -> None:
    try:
        unpack_bundle(bundle, dest)
    except OSError as exc:
        raise TaskError(f"cannot unpack {bundle} for {task.instance_id}: {exc}") from None


def _clone(task: Task, source: str, dest: Path) -> None:
    try:
        git.Repo.clone_from(source, dest, no_checkout=True, env={"GIT_TERMINAL_PROMPT": "0"}).close()
    except git.GitCommandError as exc:
        hint = "" if source.startswith("/") else f" (offline? {_CACHE_HINT})"
        reason = _git_error(exc)
        raise TaskError(f"cannot clone {task.repo} for {task.instance_id} from {source}{hint}: {reason}") from None


def _checkout(task: Task, dest: Path, source: str) -> None:
    with git.Repo(dest) as repo:  # closing it ends its `git cat-file` helpers
        _checkout_in(repo, task, source)


def _checkout_in(repo: git.Repo, task: Task, source: str) -> None:
    if task.base_commit.startswith("-"):  # Task.from_record refuses these; a Task made otherwise must not pass either
        raise TaskError(f"base commit {task.base_commit!r} of {task.instance_id} is not a revision")
    try:
        repo.git.checkout("--detach", "--force", task.base_commit)
    except git.GitCommandError:
        _fetch_commit(repo, task, source)
        repo.git.checkout("--detach", "--force", task.base_commit)
    for remote in list(repo.remotes):
        repo.delete_remote(remote)


def _fetch_commit(repo: git.Repo, task: Task, source: str) -> None:
    """Fetch a base commit no branch or tag of the source reaches (a mirror kept at a detached HEAD)."""
    try:
        repo.git.fetch("--quiet", "origin", "--end-of-options", task.base_commit, env={"GIT_TERMINAL_PROMPT": "0"})
    except git.GitCommandError:
        raise TaskError(
            f"base commit {task.base_commit} of {task.instance_id} is not in {source} (update the mirror?)"
        ) from None


def _git_error(exc: git.GitCommandError) -> str:
    """The last 'fatal:'/'error:' line git printed, without GitPython's quoting."""
    lines = [ln.strip(" '") for ln in str(exc.stderr or exc).splitlines()]
    lines = [ln.removeprefix("stderr: ").strip(" '") for ln in lines if ln.strip(" '")]
    return next((ln for ln in reversed(lines) if ln.startswith(("fatal:", "error:"))), lines[-1] if lines else "")
