"""`nexus-agent grade` end to end on a built-in task (bwrap), through the typer app."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.app import app

TASK_ID = "nexus-demo__semver-lite-1"


def test_gold_patch_resolves_and_writes_json(tmp_path, bwrap_installed):
    out = tmp_path / "report.json"
    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", "gold", "--sandbox", "bwrap", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "resolved" in res.output and "FAIL_TO_PASS" in res.output
    report = json.loads(out.read_text())
    assert report["status"] == "resolved" and report["resolved"] is True and report["backend"] == "bwrap"


def test_patch_file_and_empty(tmp_path, bwrap_installed):
    bad = tmp_path / "bad.diff"
    bad.write_text("not a diff\n")
    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", str(bad), "--sandbox", "bwrap"])
    assert res.exit_code == 1 and "patch_failed" in res.output  # 1: not resolved
    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", "empty"])
    assert res.exit_code == 1 and "empty_patch" in res.output


def test_missing_patch_file_is_a_user_error(tmp_path):
    from tasks.schema import TaskError

    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", str(tmp_path / "none.diff")])
    assert isinstance(res.exception, TaskError) and "none.diff" in str(res.exception)


def test_a_patch_file_that_is_not_utf8_is_a_user_error(tmp_path):
    from tasks.schema import TaskError

    (tmp_path / "p.diff").write_bytes(b"\xff\xfe binary")
    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", str(tmp_path / "p.diff")])
    assert isinstance(res.exception, TaskError) and "is not UTF-8 text" in str(res.exception)


def test_no_daemon_exits_nonzero_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", "gold", "--sandbox", "docker"])
    assert res.exit_code == 2 and "scripts/dockerd.sh" in res.output.replace("\n", "")  # 2: grading could not run


@pytest.mark.docker
def test_gold_patch_in_docker(builtin_image):
    res = CliRunner().invoke(app, ["grade", TASK_ID, "--patch", "gold", "--sandbox", "docker"])
    assert res.exit_code == 0 and "resolved" in res.output and "backend docker" in res.output
