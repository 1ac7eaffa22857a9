"""Working copies of non-built-in repos: from a local mirror (bare or not), never silently from elsewhere."""

import os
import subprocess

import git
import pytest

import tasks.repos as repos
from tasks.repos import prepare_repo
from tasks.schema import Task, TaskError

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def make_upstream(path):
    """A repo with two commits on main; returns (repo path, first sha, second sha)."""
    path.mkdir()
    run = lambda *args: subprocess.run(["git", *args], cwd=path, env=ENV, check=True, capture_output=True)
    run("init", "-q", "-b", "main")
    (path / "mod.py").write_text("VALUE = 1\n")
    run("add", "mod.py")
    run("commit", "-qm", "one")
    first = git.Repo(path).head.commit.hexsha
    (path / "mod.py").write_text("VALUE = 2\n")
    run("commit", "-qam", "two")
    return path, first, git.Repo(path).head.commit.hexsha


def task_at(commit: str) -> Task:
    return Task(instance_id="octo__widgets-1", repo="octo/widgets", base_commit=commit, problem_statement="x")


@pytest.mark.parametrize("bare", [False, True], ids=["working-copy", "bare"])
def test_clone_from_repo_cache(tmp_path, bare):
    upstream, first, _ = make_upstream(tmp_path / "upstream")
    cache = tmp_path / "cache"
    name = "octo__widgets.git" if bare else "octo__widgets"
    git.Repo.clone_from(upstream, cache / name, bare=bare)
    dest = prepare_repo(task_at(first), tmp_path / "testbed", repo_cache=cache)
    assert git.Repo(dest).head.commit.hexsha == first
    assert (dest / "mod.py").read_text() == "VALUE = 1\n"
    assert git.Repo(dest).remotes == []  # the fix cannot be fetched back from inside the sandbox


def test_commit_reachable_only_from_detached_head(tmp_path):
    (tmp_path / "cache").mkdir()
    upstream, _, _ = make_upstream(tmp_path / "cache" / "octo__widgets")
    (upstream / "mod.py").write_text("VALUE = 3\n")
    repo = git.Repo(upstream)
    repo.git.checkout("--detach")
    repo.git.commit("-qam", "three", env=ENV)
    detached = repo.head.commit.hexsha
    dest = prepare_repo(task_at(detached), tmp_path / "testbed", repo_cache=tmp_path / "cache")
    assert git.Repo(dest).head.commit.hexsha == detached
    assert (dest / "mod.py").read_text() == "VALUE = 3\n"


def test_missing_base_commit_is_a_clear_error(tmp_path):
    (tmp_path / "cache").mkdir()
    upstream, _, _ = make_upstream(tmp_path / "cache" / "octo__widgets")
    with pytest.raises(TaskError, match=f"base commit {'f' * 40} of octo__widgets-1 is not in {upstream}"):
        prepare_repo(task_at("f" * 40), tmp_path / "testbed", repo_cache=tmp_path / "cache")


def test_unreachable_remote_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(repos, "GITHUB_URL", str(tmp_path / "no-such-host" / "{repo}.git"))
    with pytest.raises(TaskError, match="cannot clone octo/widgets for octo__widgets-1 .*: fatal: .*does not exist"):
        prepare_repo(task_at("a" * 40), tmp_path / "testbed", repo_cache=tmp_path / "empty-cache")


def test_a_base_commit_that_git_would_read_as_an_option_runs_nothing(tmp_path):
    """`git fetch origin --upload-pack=CMD` runs CMD when origin is a local mirror: a Task made without
    Task.from_record's check (which refuses such a record) is refused here too, before any git command."""
    (tmp_path / "cache").mkdir()
    make_upstream(tmp_path / "cache" / "octo__widgets")
    planted = tmp_path / "ran"
    with pytest.raises(TaskError, match="is not a revision"):
        prepare_repo(task_at(f"--upload-pack=touch {planted};"), tmp_path / "testbed", repo_cache=tmp_path / "cache")
    assert not planted.exists()
