"""Host-side git on an agent-written repo runs none of the repo's own commands (fsmonitor, hooks, filters, ...)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.chat import changed_files, repo_git_dirs
from swe_env.safegit import run_git

ATTACKS = {
    "fsmonitor": ["core.fsmonitor", "touch {m}/fsmonitor; false"],
    "filter": ["filter.evil.clean", "touch {m}/filter; cat"],
    "process-filter": ["filter.evil.process", "touch {m}/process-filter"],
    "textconv": ["diff.evil.textconv", "touch {m}/textconv; cat"],
    "external-diff": ["diff.external", "touch {m}/external-diff"],
    "pager": ["core.pager", "touch {m}/pager; cat"],
    "hooks-path": ["core.hooksPath", "{m}/hooks"],
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def hostile_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A repo whose .git/config, hooks, attributes and an included file each try to touch a marker file."""
    repo, markers = tmp_path / "repo", tmp_path / "markers"
    repo.mkdir()
    markers.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (repo / "a.txt").write_text("two\n")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    for key, value in ATTACKS.values():
        _git(repo, "config", key, value.format(m=markers))
    (markers / "hooks").mkdir()
    for hook in ("post-index-change", "pre-commit", "reference-transaction"):
        for folder in (markers / "hooks", repo / ".git" / "hooks"):
            script = folder / hook
            script.write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
            script.chmod(0o755)
    included = tmp_path / "included.cfg"
    included.write_text(f"[core]\n\tfsmonitor = touch {markers}/include; false\n")
    _git(repo, "config", "include.path", str(included))
    return repo, markers


def test_plain_git_would_run_the_planted_commands(hostile_repo):
    """The fixture is hostile for real: an ordinary `git status` / `git diff` runs its commands."""
    repo, markers = hostile_repo
    subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True)
    subprocess.run(["git", "diff"], cwd=repo, capture_output=True)
    assert sorted(p.name for p in markers.iterdir() if p.name != "hooks")


def test_safe_git_runs_none_of_them_and_still_answers(hostile_repo):
    repo, markers = hostile_repo
    assert changed_files(repo, repo_git_dirs(repo)).splitlines() == ["M a.txt", "?? .gitattributes"]
    diff = run_git(repo, "diff").stdout
    assert "-one" in diff and "+two" in diff
    run_git(repo, "add", "-A")
    assert run_git(repo, "log", "--oneline", "-p").returncode == 0
    assert [p.name for p in markers.iterdir()] == ["hooks"]  # no marker file: nothing ran


def test_a_linked_worktree_and_a_non_repo(tmp_path: Path, hostile_repo):
    repo, markers = hostile_repo
    _git(repo, "worktree", "add", "-q", str(tmp_path / "wt"))  # plain git: runs the planted hooks
    for marker in markers.iterdir():
        if marker.name != "hooks":
            marker.unlink()
    assert (
        run_git(tmp_path / "wt", "rev-parse", "HEAD").stdout.strip()
        == run_git(repo, "rev-parse", "HEAD").stdout.strip()
    )
    assert [p.name for p in markers.iterdir()] == ["hooks"]
    assert changed_files(tmp_path / "markers", repo_git_dirs(tmp_path / "markers")) == ""


@pytest.mark.parametrize(
    "name,content",
    [(".git/commondir", b"\xff\xfe"), (".git/commondir", b"a\x00b"), (".git", b"gitdir: a\x00b"), (".git", b"\xff")],
)
def test_planted_git_link_files_are_no_crash(tmp_path: Path, name: str, content: bytes) -> None:
    """What the agent can write in place of `.git` or `.git/commondir` (any bytes) gives no answer, never an
    exception in the host process (chat shows `git status` after every request)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    if name == ".git":
        subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)
    opened = repo_git_dirs(repo)
    (repo / name).write_bytes(content)
    assert changed_files(repo, repo_git_dirs(repo)) == ""  # a chat opened on it (resumed) shows nothing
    assert changed_files(repo, opened) == ""  # one opened before (an empty repo: nothing changed)


def test_a_git_link_planted_to_another_host_repo_shows_none_of_its_paths(tmp_path: Path) -> None:
    """The agent swaps the user's `.git` for a link to another repository on the host: the chat's `git status`
    keeps to the git dir it found when it opened, so that repository's paths never show."""
    other, repo = tmp_path / "other", tmp_path / "repo"
    for r, name in ((other, "secret_plan.txt"), (repo, "mine.txt")):
        r.mkdir()
        _git(r, "init", "-q")
        (r / name).write_text("x\n")
        _git(r, "add", name)
        _git(r, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    opened = repo_git_dirs(repo)
    (repo / "mine.txt").write_text("changed\n")
    assert changed_files(repo, opened) == "M mine.txt"
    (repo / ".git").rename(repo / ".git-moved")
    (repo / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert "secret_plan" in changed_files(repo, repo_git_dirs(repo))  # what following the link would show
    assert changed_files(repo, opened) == ""  # the git dir it opened with is gone: nothing
    (repo / ".git").unlink()
    (repo / ".git-moved").rename(repo / ".git")
    (repo / "sub").mkdir()
    (repo / "sub" / ".git").write_text(f"gitdir: {other / '.git'}\n")  # elsewhere in the tree: not followed
    assert "secret_plan" not in changed_files(repo, opened)
    (repo / ".git" / "index").unlink()
    (repo / ".git" / "index").symlink_to(other / ".git" / "index")  # a link to its index, inside the git dir
    assert "secret_plan" not in changed_files(repo, opened)
