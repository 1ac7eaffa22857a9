"""Grading every built-in task, in both backends: gold resolves, empty and reverting patches do not, junk fails."""

from __future__ import annotations

import json

import pytest

from swe_env.grading import GradeConfig, GradeReport, grade
from swe_env.sandbox.factory import SandboxConfig
from tasks.builtin import builtin_tasks

TASKS = builtin_tasks()
IDS = [t.instance_id for t in TASKS]
NOT_APPLYING = (
    "diff --git a/no_such_file.py b/no_such_file.py\n--- a/no_such_file.py\n+++ b/no_such_file.py\n"
    "@@ -1 +1 @@\n-a\n+b\n"
)


def _config(backend: str) -> GradeConfig:
    return GradeConfig(backend=backend, sandbox=SandboxConfig(install_tools=False), test_timeout=300)


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> str:
    if request.param == "docker":
        request.getfixturevalue("builtin_image")
    else:
        request.getfixturevalue("bwrap_installed")
    return request.param


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_gold_patch_resolves(task, backend):
    report = grade(task, task.patch, config=_config(backend))
    assert report.status == "resolved", (report.error, report.log_excerpt[-2000:])
    assert report.resolved and report.backend == backend and report.apply_method == "git apply"
    assert set(report.fail_to_pass) == set(task.fail_to_pass) and set(report.pass_to_pass) == set(task.pass_to_pass)
    assert all(v == "PASSED" for v in report.fail_to_pass.values())
    assert all(v in ("PASSED", "SKIPPED", "XFAIL") for v in report.pass_to_pass.values())


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_unfixed_code_is_unresolved_and_junk_fails_to_apply(task, backend):
    # a patch that touches only the tests leaves the bug in place: the FAIL_TO_PASS tests must fail
    report = grade(task, task.test_patch, config=_config(backend))
    assert report.status == "unresolved" and not report.resolved, report.error
    assert all(v != "PASSED" for v in report.fail_to_pass.values())
    bad = grade(task, NOT_APPLYING, config=_config(backend))
    assert bad.status == "patch_failed" and bad.apply_method is None and not bad.resolved
    assert "no_such_file.py" in bad.log_excerpt


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_empty_patch_is_not_resolved(task):
    report = grade(task, "  \n", config=_config("bwrap"))
    assert report.status == "empty_patch" and not report.resolved


def test_patch_with_stale_context_falls_back_to_fuzz(bwrap_installed):
    task = TASKS[0]
    lines = task.patch.splitlines(keepends=True)
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@ "))
    ctx = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[ctx] = " # a context line that no longer matches\n"  # git apply needs exact context; fuzz drops it
    report = grade(task, "".join(lines), config=_config("bwrap"))
    assert report.apply_method == "patch --fuzz=5", report.log_excerpt[-1500:]
    assert report.status == "resolved", report.log_excerpt[-1500:]


def test_report_json_round_trip():
    report = GradeReport("x", "resolved", True, {"t": "PASSED"}, {}, "git apply", "bwrap")
    assert GradeReport(**json.loads(report.to_json())) == report
