"""The sandbox of a chat: a bubblewrap sandbox whose /testbed is the user's repo itself, the host-side git that
reads that repo safely, and the environment the agent's calls run in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.protocols import ToolCall, ToolResult
from swe_env.safegit import GitError, git_dirs, run_git

# What chat's shell tool may run that a task's may not: git's read-only subcommands (swe_env/tools/execute_bash.py),
# which take no optional lock (`git status` leaves the index file as it is).
CHAT_TOOL_ENV = (("NEXUS_GIT_READ_ONLY", "1"), ("GIT_OPTIONAL_LOCKS", "0"))


def open_repo_sandbox(repo: Path, name: str, env=None):
    """A bubblewrap sandbox whose /testbed IS the user's repo (edits land there), tools installed, no network, the
    shell tool allowed read-only git; `env`: the repo's Python env (pipeline.chat.env), first on PATH after the
    tools."""
    from pipeline.chat.env import sandbox_settings  # lazy: git, urllib, off --help
    from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox  # lazy: git, urllib, off --help
    from tasks.schema import Task  # lazy: urllib, off --help

    head = _git(repo, "rev-parse", "HEAD") or "HEAD"
    task = Task(instance_id=f"chat:{name}", repo=f"local/{repo.name}", base_commit=head, problem_statement="chat")
    settings = sandbox_settings(env, repo)
    settings["extra_env"] = (*settings.get("extra_env", ()), *CHAT_TOOL_ENV)
    return BwrapSandbox(task, BwrapConfig(python_env=False, **settings), repo=repo)


def _git(repo: Path, *args: str, dirs: tuple[Path, Path] | None = None) -> str:
    """Host-side git on the user's repo, which the agent can write: none of the repo's own config runs."""

    try:
        res = run_git(repo, *args, timeout=30, dirs=dirs)
    except GitError:
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def repo_git_dirs(repo: Path) -> tuple[Path, Path] | None:
    """The user's repo's git dirs as its `.git` names them now (None: not a git repo). Taken when a chat opens,
    before the agent runs anything: the agent can rewrite `.git` to name another repository on the host, and the
    chat's `git status` must not show the user (or anyone reading the terminal) that repository's paths."""

    try:
        return git_dirs(repo)
    except (GitError, OSError):
        return None


def changed_files(repo: Path, dirs: tuple[Path, Path] | None) -> str:
    """`git status --short` of the user's repo with the git dirs `repo_git_dirs` found when the chat opened ("" when
    it is not a git repo, those dirs are gone, or nothing changed)."""
    return _git(repo, "status", "--short", dirs=dirs) if dirs is not None else ""


@dataclass
class ChatEnvironment:
    """Runs tool calls in the sandbox; never stages anything in the user's repo (no `git add` for a patch). The
    last call's whole output is kept for the chat to show (`last`, until the chat takes it)."""

    sandbox: Any
    last: ToolResult | None = None

    def execute(self, call: ToolCall, timeout: float) -> ToolResult:
        from agent.environment import SandboxEnvironment  # lazy: urllib, off --help

        self.last = SandboxEnvironment(self.sandbox).execute(call, timeout)
        return self.last

    def get_patch(self) -> str:
        return ""
