"""execute_bash, run as the sandbox runs it: an executable without .py, called through command_for + bash."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from swe_env.tools import command_for, install_tools


@pytest.fixture
def tools(tmp_path: Path) -> str:
    install_tools(tmp_path / "tools")
    return str(tmp_path / "tools")


def bash_tool(tools: str, cwd: Path, cmd: str, timeout: str = "90", **env_vars: str) -> tuple[str, int]:
    env = dict(os.environ, NEXUS_EXEC_TIMEOUT=timeout, **env_vars)
    proc = subprocess.run(
        ["bash", "-c", command_for("execute_bash", {"cmd": cmd}, tools)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout + proc.stderr, proc.returncode


def test_output_and_return_code(tools: str, tmp_path: Path) -> None:
    out, rc = bash_tool(tools, tmp_path, "echo to-out; echo to-err >&2")
    assert rc == 0
    assert out.index("[STDOUT]") < out.index("to-out") < out.index("[STDERR]") < out.index("to-err")
    out, rc = bash_tool(tools, tmp_path, "echo partial; exit 7")
    assert rc == 7
    assert "partial" in out
    assert "Error executing command" in out


def test_runs_in_the_current_directory(tools: str, tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("here")
    out, rc = bash_tool(tools, tmp_path, "pwd && cat marker.txt")
    assert rc == 0
    assert str(tmp_path) in out
    assert "here" in out


def test_multiline_and_special_characters_survive(tools: str, tmp_path: Path) -> None:
    cmd = "cat > s.py <<'EOF'\nprint(\"it's $HOME `x`\")\nEOF\npython3 s.py"
    out, rc = bash_tool(tools, tmp_path, cmd)
    assert rc == 0, out
    assert "it's $HOME `x`" in out


def test_a_leading_dash_is_not_an_option(tools: str, tmp_path: Path) -> None:
    out, rc = bash_tool(tools, tmp_path, "-h")
    assert rc == 127
    assert "command not found" in out


@pytest.mark.parametrize(
    "cmd",
    [
        "git status",
        "cd /tmp && git log",
        "ls | nohup sleep 1",
        "A=1 /usr/bin/git diff",
        "echo $(git rev-parse HEAD)",
        "ipython",
        "jupyter notebook",
        "vim x.py",
        "for f in a; do git add $f; done",
    ],
)
def test_blocked_commands(tools: str, tmp_path: Path, cmd: str) -> None:
    out, rc = bash_tool(tools, tmp_path, f"touch ran; {cmd}")
    assert rc != 0
    assert "is not allowed" in out
    assert not (tmp_path / "ran").exists()  # nothing at all was run


def _git_repo(path: Path) -> Path:
    """A real repository with one commit (a.py) and one uncommitted change to it."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    path.mkdir()
    (path / "a.py").write_text("x = 1\n")
    for cmd in (["init", "-q"], ["add", "a.py"], ["commit", "-qm", "first commit"]):
        subprocess.run([*git, *cmd], cwd=path, check=True, capture_output=True)
    (path / "a.py").write_text("x = 2\n")
    return path


READ_ONLY_GIT = {  # command -> what its real output holds
    "git status --short": "M a.py",
    "git diff": "+x = 2",
    "git log --oneline": "first commit",
    "git --no-pager show --stat HEAD": "a.py",
    "git blame HEAD -- a.py": "x = 1",
    "git ls-files": "a.py",
    "git grep -n x HEAD": "HEAD:a.py:1:x = 1",
    "cd /tmp && git -C {repo} diff --stat": "a.py",
    "git log -1 --format=%s | tr a-z A-Z": "FIRST COMMIT",
}


@pytest.mark.parametrize("cmd", sorted(READ_ONLY_GIT))
def test_read_only_git_runs_when_the_chat_allows_it(tools: str, tmp_path: Path, cmd: str) -> None:
    repo = _git_repo(tmp_path / "repo")
    out, rc = bash_tool(tools, repo, cmd.format(repo=repo), NEXUS_GIT_READ_ONLY="1")
    assert rc == 0, out
    assert READ_ONLY_GIT[cmd] in out, out
    out, rc = bash_tool(tools, repo, cmd.format(repo=repo))  # solve and eval: every git is refused
    assert rc == 1
    assert "Bash command 'git' is not allowed (the environment manages the repository" in out


@pytest.mark.parametrize(
    "cmd",
    [
        "git commit -am x",
        "git add a.py",
        "git checkout -- a.py",
        "git reset --hard",
        "git stash",
        "git",
        "git status && git commit -am x",
        "git -c core.pager=touch\\ ran log",
        "git --git-dir=/elsewhere log",
        "git diff --output=patch.txt",
        "git grep -Otouch x",
        "git log $(git rev-parse HEAD)",
    ],
)
def test_other_git_is_still_refused_in_chat(tools: str, tmp_path: Path, cmd: str) -> None:
    repo = _git_repo(tmp_path / "repo")
    out, rc = bash_tool(tools, repo, f"touch ran; {cmd}", NEXUS_GIT_READ_ONLY="1")
    assert rc == 1
    assert "Bash command 'git' is not allowed" in out
    assert not (repo / "ran").exists()
    assert not (repo / "patch.txt").exists()  # nothing at all was run
    assert (repo / "a.py").read_text() == "x = 2\n"


@pytest.mark.parametrize("cmd", ["echo git", "grep -c git words.txt", "cat <<EOF\ngit is data\nEOF", 'echo "a; git"'])
def test_the_word_git_as_data_is_fine(tools: str, tmp_path: Path, cmd: str) -> None:
    (tmp_path / "words.txt").write_text("git\n")
    out, rc = bash_tool(tools, tmp_path, cmd)
    assert rc == 0, out
    assert "not allowed" not in out


def test_timeout_kills_the_process_group(tools: str, tmp_path: Path) -> None:
    start = time.monotonic()
    out, rc = bash_tool(tools, tmp_path, "echo started; (sleep 30; touch late) & sleep 30", timeout="1")
    assert time.monotonic() - start < 15
    assert rc == 124
    assert "timed out after 1 seconds" in out
    assert "started" in out
    time.sleep(0.2)
    assert not (tmp_path / "late").exists()


def test_stdin_is_closed(tools: str, tmp_path: Path) -> None:
    out, rc = bash_tool(tools, tmp_path, "cat; echo after", timeout="10")
    assert rc == 0
    assert "after" in out


def test_missing_cmd_is_an_error(tools: str, tmp_path: Path) -> None:
    proc = subprocess.run([f"{tools}/execute_bash"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("ERROR: Parameter `cmd` is required")
    assert "Traceback" not in proc.stdout + proc.stderr


def test_unknown_parameter_is_an_error(tools: str, tmp_path: Path) -> None:
    cmd = command_for("execute_bash", {"cmd": "touch ran", "odd key": "1"}, tools)
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("ERROR: unrecognized arguments")
    assert not (tmp_path / "ran").exists()


def test_background_children_neither_stall_nor_outlive_the_command(tools: str, tmp_path: Path) -> None:
    start = time.monotonic()
    out, rc = bash_tool(tools, tmp_path, "(sleep 2; touch late) & echo quick", timeout="20")
    assert time.monotonic() - start < 1.8
    assert rc == 0
    assert "quick" in out
    time.sleep(2.3)
    assert not (tmp_path / "late").exists()


def test_endless_output_keeps_its_start_and_end(tools: str, tmp_path: Path) -> None:
    out, rc = bash_tool(tools, tmp_path, "echo FIRST; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo LAST")
    assert rc == 0
    assert "FIRST" in out
    assert "LAST" in out
    assert "bytes of output omitted" in out
    assert len(out) < 1_200_000
