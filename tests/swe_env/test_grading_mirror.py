"""A SWE-bench-style task from a local mirror (not built in), graded in bwrap with a per-repo Python env.

Uses the derived test command (pytest on the files the test patch touches), swebench's pytest parser and an env
built from PyPI the first time (skipped when PyPI is unreachable).
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from swe_env.grading import GradeConfig, grade
from swe_env.pyenv import PyEnvConfig
from swe_env.sandbox.bwrap import BwrapConfig
from tasks.schema import Task

pytestmark = pytest.mark.slow
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
GOLD = """diff --git a/widget/core.py b/widget/core.py
--- a/widget/core.py
+++ b/widget/core.py
@@ -1,2 +1,2 @@
 def clamp(x, lo, hi):
-    return max(lo, min(x, lo))
+    return max(lo, min(x, hi))
"""
TEST_PATCH = """diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -3,0 +4,4 @@ from widget.core import clamp
+
+
+def test_clamp_inside():
+    assert clamp(5, 0, 10) == 5
"""


def _git(repo: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=repo, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}, capture_output=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.decode().strip()


@pytest.fixture
def mirrored_task(tmp_path) -> tuple[Task, Path]:
    repo = tmp_path / "mirrors" / "acme__widget"
    (repo / "widget").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "widget" / "__init__.py").write_text("")
    (repo / "widget" / "core.py").write_text("def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n")
    (repo / "tests" / "test_core.py").write_text(
        "from widget.core import clamp\n\ndef test_clamp_low():\n    assert clamp(-5, 0, 10) == 0\n"
    )
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    task = Task(
        "acme__widget-7", "acme/widget", _git(repo, "rev-parse", "HEAD"), "clamp ignores hi", patch=GOLD,
        test_patch=TEST_PATCH, fail_to_pass=["tests/test_core.py::test_clamp_inside"],
        pass_to_pass=["tests/test_core.py::test_clamp_low"], version="1.0",
    )  # fmt: skip
    return task, repo.parent


def test_mirrored_task_grades_like_swebench(mirrored_task, tmp_path, bwrap_installed):
    try:
        urllib.request.urlopen("https://pypi.org/simple/pytest/", timeout=5).close()
    except OSError:
        pytest.skip("PyPI is not reachable (the task's Python env needs pytest from it)")
    task, mirrors = mirrored_task
    sandbox = BwrapConfig(repo_cache=mirrors, install_tools=False, pyenv=PyEnvConfig(cache_dir=tmp_path / "envs"))
    cfg = GradeConfig(backend="bwrap", sandbox=sandbox, test_timeout=300)
    gold = grade(task, GOLD, config=cfg)
    assert gold.status == "resolved", (gold.error, gold.log_excerpt)
    assert gold.test_cmd.endswith("tests/test_core.py") and gold.test_cmd.startswith("pytest")
    unfixed = grade(task, TEST_PATCH, config=cfg)
    assert unfixed.status == "unresolved" and unfixed.fail_to_pass == {
        "tests/test_core.py::test_clamp_inside": "FAILED"
    }
    assert unfixed.pass_to_pass == {"tests/test_core.py::test_clamp_low": "PASSED"}
