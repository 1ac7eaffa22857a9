"""chat's shell runs read-only git on the user's repo, in the real bubblewrap sandbox, and refuses the rest (which
solve and eval refuse all of): a scripted model's calls, what the chat shows, and the repo as it is after."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from chatlib import bash, failing_repo, finish, open_chat, shown

from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
REFUSED = "Bash command 'git' is not allowed"


def _host_git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_the_chat_agent_reads_git_and_cannot_change_it(tmp_path: Path) -> None:
    repo = failing_repo(tmp_path)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")  # the user's uncommitted work
    replies = [
        bash("git status --short; git log --oneline; git diff"),
        bash("git blame HEAD -- calc.py && git ls-files && git grep -n add HEAD -- test_calc.py"),
        bash("git commit -qam sneaky"),
        bash("git checkout -- calc.py"),
        bash("git stash"),
        finish(),
    ]
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, replies, sandbox)
        chat.banner()
        assert "runs read-only git (status, diff, log, show, blame, ls-files, grep)" in " ".join(shown(chat).split())
        chat.request("what changed?")
        out = shown(chat)
        chat.runner.writer.close()
    assert "M calc.py" in out
    assert " init" in out
    assert "+    return a + b" in out  # status, log, diff
    assert "return a - b" in out
    assert "test_calc.py" in out
    assert "HEAD:test_calc.py:1:from calc import add" in out
    assert out.count(REFUSED) == 3  # commit, checkout, stash
    assert len(_host_git(repo, "log", "--oneline").splitlines()) == 1  # nothing committed
    assert (repo / "calc.py").read_text().endswith("a + b\n")
    assert _host_git(repo, "stash", "list") == ""


def test_a_task_sandbox_still_refuses_git(tmp_path: Path) -> None:
    from agent.environment import SandboxEnvironment
    from agent.protocols import ToolCall
    from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
    from tasks.schema import Task

    repo = failing_repo(tmp_path)
    task = Task("local__calc-1", "local/calc", _host_git(repo, "rev-parse", "HEAD").strip(), "x")
    with BwrapSandbox(task, BwrapConfig(python_env=False), repo=repo) as sandbox:  # no chat settings: solve's rules
        res = SandboxEnvironment(sandbox).execute(ToolCall("execute_bash", {"cmd": "git status"}), 30)
    assert res.returncode == 1
    assert REFUSED in res.output
