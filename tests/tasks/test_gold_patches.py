"""Every built-in task is a real task: its tests fail without the gold fix and pass with it.

Uses real git (`git apply`) and a real pytest run of the task's test_cmd, parsed with swebench's pytest parser,
the same way grading does it.
"""

import os
import subprocess
import sys

import pytest
from swebench.harness.log_parsers.python import parse_log_pytest

from tasks import load_tasks
from tasks.repos import prepare_repo

TASKS = load_tasks("builtin")


def apply(repo, patch: str, check: bool = False) -> None:
    cmd = ["git", "apply", "--check", "-"] if check else ["git", "apply", "-"]
    res = subprocess.run(cmd, cwd=repo, input=patch, text=True, capture_output=True)
    assert res.returncode == 0, res.stderr


def run_tests(repo, test_cmd: str) -> dict[str, str]:
    """Run the task's own command with this interpreter; return {test id: PASSED/FAILED/...}."""
    assert test_cmd.startswith("python3 ")
    cmd = f"{sys.executable} {test_cmd.removeprefix('python3 ')} -p no:cacheprovider"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the task repos need no plugins; startup is much faster
    res = subprocess.run(cmd, cwd=repo, shell=True, text=True, capture_output=True, env=env, timeout=120)
    return parse_log_pytest(res.stdout, None)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
def test_gold_patch_resolves_and_test_patch_alone_fails(task, tmp_path):
    repo = prepare_repo(task, tmp_path / "testbed")
    apply(repo, task.patch, check=True)  # the gold patch applies on the bare base commit
    apply(repo, task.test_patch)
    before = run_tests(repo, task.test_cmd)
    assert [t for t in task.fail_to_pass if before.get(t) == "PASSED"] == []
    assert [t for t in task.pass_to_pass if before.get(t) != "PASSED"] == []
    apply(repo, task.patch)
    after = run_tests(repo, task.test_cmd)
    assert {t: after.get(t) for t in task.fail_to_pass + task.pass_to_pass if after.get(t) != "PASSED"} == {}
