"""The verdict from a test log (swebench's parsers and rules) and the test command for real SWE-bench repos."""

from __future__ import annotations

from swe_env import testspec
from swe_env.grading import GradeReport, _judge
from tasks.schema import Task

PYTEST_LOG = """\
============================= test session starts ==============================
collected 4 items

tests/test_a.py ..F.
=========================== short test summary info ============================
PASSED tests/test_a.py::test_fixed
PASSED tests/test_a.py::test_kept
PASSED tests/test_a.py::test_param[a b]
SKIPPED tests/test_a.py::test_optional
FAILED tests/test_a.py::test_broken - AssertionError: boom
========================= 1 failed, 3 passed in 0.10s ==========================
"""
TEST_PATCH = """\
diff --git a/tests/test_a.py b/tests/test_a.py
--- a/tests/test_a.py
+++ b/tests/test_a.py
@@ -1 +1 @@
-x
+y
diff --git a/tests/data/sample.json b/tests/data/sample.json
--- a/tests/data/sample.json
+++ b/tests/data/sample.json
@@ -1 +1 @@
-1
+2
"""


def _task(f2p, p2p, repo="acme/widget", **kw) -> Task:
    return Task("acme__widget-1", repo, "abc", "issue", fail_to_pass=f2p, pass_to_pass=p2p, **kw)


def _verdict(task: Task, log: str, code: int) -> GradeReport:
    report = GradeReport(task.instance_id, "error", False)
    _judge(task, log, code, report)
    return report


def test_all_pass_is_resolved():
    # SWE-bench's ids of parametrised tests with spaces are cut at the space, as its parser cuts them
    task = _task(["tests/test_a.py::test_fixed"], ["tests/test_a.py::test_kept", "tests/test_a.py::test_param[a"])
    report = _verdict(task, PYTEST_LOG, 1)
    assert report.status == "resolved" and report.resolved
    assert report.pass_to_pass["tests/test_a.py::test_param[a"] == "PASSED"


def test_a_skipped_test_is_neither_success_nor_failure():
    # swebench: a skipped PASS_TO_PASS test does not unresolve; a skipped FAIL_TO_PASS test alone resolves nothing
    kept = _verdict(_task(["tests/test_a.py::test_fixed"], ["tests/test_a.py::test_optional"]), PYTEST_LOG, 1)
    assert kept.status == "resolved" and kept.pass_to_pass == {"tests/test_a.py::test_optional": "SKIPPED"}
    skipped_fix = _verdict(_task(["tests/test_a.py::test_optional", "tests/test_a.py::test_broken"], []), PYTEST_LOG, 1)
    assert skipped_fix.status == "unresolved"


def test_a_failing_or_missing_test_is_unresolved():
    failing = _verdict(_task(["tests/test_a.py::test_broken"], []), PYTEST_LOG, 1)
    assert failing.status == "unresolved" and failing.fail_to_pass == {"tests/test_a.py::test_broken": "FAILED"}
    missing = _verdict(_task(["tests/test_a.py::test_fixed"], ["tests/test_a.py::test_gone"]), PYTEST_LOG, 1)
    assert missing.status == "unresolved" and missing.pass_to_pass["tests/test_a.py::test_gone"] == "MISSING"


def test_logs_without_results_or_contradicting_the_exit_code_are_errors():
    assert _verdict(_task(["t"], []), "ImportError: no module named x\n", 2).status == "error"
    only_passes = "PASSED tests/test_a.py::test_fixed\n"
    assert _verdict(_task(["tests/test_a.py::test_fixed"], []), only_passes, 0).status == "resolved"
    assert _verdict(_task(["tests/test_a.py::test_fixed"], []), only_passes, 1).status == "error"


def test_test_commands():
    assert testspec.test_command(_task([], [], test_cmd="python3 -m pytest -rA tests")) == "python3 -m pytest -rA tests"
    assert testspec.test_directives(_task([], [], test_patch=TEST_PATCH)) == ["tests/test_a.py"]
    assert testspec.test_command(_task([], [], test_patch=TEST_PATCH)).endswith(
        "-rA --tb=no -p no:cacheprovider tests/test_a.py"
    )
    django_patch = TEST_PATCH.replace("tests/test_a.py", "tests/admin_views/tests.py")
    django = _task([], [], repo="django/django", test_patch=django_patch)
    assert testspec.test_command(django).startswith("./tests/runtests.py") and testspec.test_directives(django) == [
        "admin_views.tests"
    ]


def test_parsers_follow_the_repo():
    assert testspec.log_parser(_task([], [])).__name__ == "parse_log_pytest"
    assert testspec.log_parser(_task([], [], repo="django/django")).__name__ == "parse_log_django"
    assert testspec.log_parser(_task([], [], repo="sympy/sympy")).__name__ == "parse_log_sympy"
