"""Repo caches of mirrors and (shallow) git bundles, chosen by --repo-cache or $NEXUS_REPO_CACHE."""

from __future__ import annotations

import subprocess

import git
import pytest
from shared_data import shared_path

from tasks.mirrors import REPO_CACHE_ENV, bundle_heads, find_source, repo_cache_dir
from tasks.repos import prepare_repo
from tasks.schema import Task

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, env={**ENV, "PATH": "/usr/bin:/bin"}, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


def _shallow_bundle(tmp_path):
    """A bundle made from a depth-1 clone (its commit's parent is not in it), as the shared data's are."""
    up = tmp_path / "up"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main")
    for value in (1, 2):
        (up / "mod.py").write_text(f"VALUE = {value}\n")
        _git(up, "add", "mod.py")
        _git(up, "commit", "-qm", f"v{value}")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", "-b", "main", f"file://{up}", str(shallow))
    _git(shallow, "branch", "base")
    cache = tmp_path / "cache"
    cache.mkdir()
    _git(shallow, "bundle", "create", str(cache / "octo__widgets-abc.bundle"), "base")
    return cache, _git(up, "rev-parse", "HEAD")


def _task(commit: str) -> Task:
    return Task("octo__widgets-1", "octo/widgets", commit, "x")


def test_shallow_bundle_gives_a_working_copy_at_the_base_commit(tmp_path):
    cache, head = _shallow_bundle(tmp_path)
    assert bundle_heads(cache / "octo__widgets-abc.bundle") == [head]
    dest = prepare_repo(_task(head), tmp_path / "wc", repo_cache=cache)  # `git clone` of this bundle would fail
    assert git.Repo(dest).head.commit.hexsha == head and (dest / "mod.py").read_text() == "VALUE = 2\n"
    assert _git(dest, "status", "--porcelain") == ""


def test_repo_cache_from_the_environment(tmp_path, monkeypatch):
    cache, head = _shallow_bundle(tmp_path)
    monkeypatch.setenv(REPO_CACHE_ENV, str(cache))
    assert repo_cache_dir(None) == cache and repo_cache_dir(tmp_path) == tmp_path  # a given dir wins
    dest = prepare_repo(_task(head), tmp_path / "wc")
    assert git.Repo(dest).head.commit.hexsha == head


def test_a_mirror_dir_wins_over_a_bundle(tmp_path):
    cache, _ = _shallow_bundle(tmp_path)
    (cache / "octo__widgets").mkdir()
    assert find_source("octo/widgets", cache) == (cache / "octo__widgets").resolve()
    assert find_source("octo/other", cache) is None and find_source("octo/widgets", None) is None


@pytest.mark.parametrize(
    "repo, name",
    [
        ("pylint-dev/astroid", "pylint-dev__astroid-ce5cbce5.bundle"),
        ("sqlfluff/sqlfluff", "sqlfluff__sqlfluff-23d69860.bundle"),
    ],
)
def test_shared_bundles_unpack_at_their_base_commit(tmp_path, repo, name):
    bundle = shared_path("repos", name)
    head = bundle_heads(bundle)[0]
    dest = prepare_repo(Task("x-1", repo, head, "x"), tmp_path / "wc", repo_cache=bundle.parent)
    assert git.Repo(dest).head.commit.hexsha == head
