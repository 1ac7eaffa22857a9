"""The built-in tasks: schema, variety, and a base commit that is the same SHA on every machine."""

import re

import git
import pytest

from tasks import load_tasks
from tasks.builtin import builtin_repo_files
from tasks.repos import create_builtin_repo, prepare_repo
from tasks.schema import TaskError

TASKS = load_tasks("builtin")
NODE_ID = re.compile(r"^tests/[\w/]+\.py::\w+(\[[^\s\]]+\])?$")


def changed_files(patch: str) -> list[str]:
    return re.findall(r"^diff --git a/(\S+) b/\S+$", patch, flags=re.M)


def test_at_least_six_tasks_with_unique_ids():
    ids = [t.instance_id for t in TASKS]
    assert len(ids) >= 6 and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"nexus-demo__[a-z-]+-\d+", i) for i in ids)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
def test_record_is_complete(task):
    assert task.repo.startswith("nexus-demo/") and re.fullmatch(r"[0-9a-f]{40}", task.base_commit)
    assert task.fail_to_pass and task.pass_to_pass
    assert not set(task.fail_to_pass) & set(task.pass_to_pass)
    assert all(NODE_ID.match(t) for t in task.fail_to_pass + task.pass_to_pass)
    assert task.test_cmd.startswith("python3 -m pytest -rA tests/")
    assert len(task.problem_statement.splitlines()) >= 5
    assert all(not f.startswith("tests/") for f in changed_files(task.patch))
    assert all(f.startswith("tests/") for f in changed_files(task.test_patch))
    test_files = {t.split("::")[0] for t in task.fail_to_pass + task.pass_to_pass}
    assert test_files == set(task.test_cmd.split()[4:])


def test_variety():
    by_id = {t.instance_id: t for t in TASKS}
    one_line = [t for t in TASKS if sum(ln.startswith("+") for ln in t.patch.splitlines()[4:]) == 1]
    assert len(one_line) >= 2
    assert len(changed_files(by_id["nexus-demo__tzdates-1"].patch)) == 2  # a multi-file fix
    long_file = builtin_repo_files("nexus-demo__iniconf-1")["iniconf/parser.py"]
    assert len(long_file.splitlines()) >= 500  # the bug sits deep in one long module
    assert changed_files(by_id["nexus-demo__invoicer-1"].patch) == ["invoicer/money.py"]
    assert "render_invoice" in by_id["nexus-demo__invoicer-1"].problem_statement  # symptom two calls away


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
def test_repo_files_are_source_not_build_output(task):
    files = builtin_repo_files(task.instance_id)
    assert "pyproject.toml" in files and any(f.startswith("tests/test_") for f in files)
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert 100 <= sum(len(c.splitlines()) for c in files.values()) <= 1500


def test_base_commit_is_deterministic(tmp_path, monkeypatch):
    task = TASKS[0]
    first = create_builtin_repo(task.instance_id, tmp_path / "one")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "someone else")  # the user's identity must not leak into the commit
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2030-01-01T00:00:00")
    second = create_builtin_repo(task.instance_id, tmp_path / "two")
    assert first == second == task.base_commit


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
def test_prepare_repo_gives_recorded_base_commit(task, tmp_path):
    dest = prepare_repo(task, tmp_path / "testbed")
    repo = git.Repo(dest)
    assert repo.head.commit.hexsha == task.base_commit
    assert not repo.is_dirty(untracked_files=True)


def test_prepare_repo_refuses_non_empty_dest(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(TaskError, match="not empty"):
        prepare_repo(TASKS[0], tmp_path)
