"""`nexus-agent tasks list|show` through the real typer app (and the real console script for a user error)."""

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from cli.app import app
from tasks import get_task, load_tasks

runner = CliRunner()


def test_list_builtin():
    result = runner.invoke(app, ["tasks", "list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for task in load_tasks("builtin"):
        assert task.instance_id in result.output
    assert "Extra empty page when the number of items is a multiple of per_page" in result.output


def test_list_file(tmp_path):
    rec = {"instance_id": "octo__w-1", "repo": "octo/w", "base_commit": "a" * 40, "problem_statement": "Crash\nx"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    result = runner.invoke(app, ["tasks", "list", "--dataset", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "octo__w-1" in result.output and "Crash" in result.output


def test_show_prints_issue_lists_and_patches():
    result = runner.invoke(app, ["tasks", "show", "nexus-demo__tzdates-1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    task = get_task("nexus-demo__tzdates-1")
    assert task.base_commit in result.output
    assert "FAIL_TO_PASS (5)" in result.output
    assert "tests/test_roundtrip.py::test_india_time_to_utc" in result.output
    assert "diff --git a/tzdates/parsing.py b/tzdates/parsing.py" in result.output


def test_show_json_is_the_swebench_record():
    result = runner.invoke(app, ["tasks", "show", "nexus-demo__iniconf-1", "--json"])
    assert result.exit_code == 0, result.output
    rec = json.loads(result.output)
    assert rec["instance_id"] == "nexus-demo__iniconf-1"
    assert json.loads(rec["FAIL_TO_PASS"]) == get_task("nexus-demo__iniconf-1").fail_to_pass


def test_unknown_id_is_one_line_error():
    code = "import sys; sys.argv = ['nexus-agent', 'tasks', 'show', 'nexus-demo__pagekit-9']; " + (
        "import cli.app, cli.errors; cli.errors.run(cli.app.app)"
    )
    env = {**os.environ, "COLUMNS": "300"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2
    assert "did you mean nexus-demo__pagekit-1? (list them: nexus-agent tasks list)" in res.stderr
    assert "Traceback" not in res.stderr
