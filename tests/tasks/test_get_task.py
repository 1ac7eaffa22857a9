"""Looking a task up by id."""

import json

import pytest

from tasks import get_task
from tasks.schema import TaskError


def test_builtin_by_id():
    task = get_task("nexus-demo__pagekit-1")
    assert task.repo == "nexus-demo/pagekit"
    assert task.source == "builtin"


def test_unknown_id_suggests_close_matches():
    with pytest.raises(TaskError) as info:
        get_task("nexus-demo__pagekit-2")
    message = str(info.value)
    assert "did you mean nexus-demo__pagekit-1" in message
    assert "nexus-agent tasks list" in message


def test_unknown_id_without_close_match(tmp_path):
    path = tmp_path / "t.json"
    rec = {"instance_id": "octo__w-1", "repo": "octo/w", "base_commit": "a" * 40, "problem_statement": "x"}
    path.write_text(json.dumps(rec))
    with pytest.raises(TaskError) as info:
        get_task("zzz", str(path))
    assert "did you mean" not in str(info.value)
    assert f"nexus-agent tasks list --dataset {path}" in str(info.value)
