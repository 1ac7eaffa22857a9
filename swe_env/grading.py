"""Grade a patch like SWE-bench: fresh sandbox, apply model patch + test patch, run the tests, parse the log.

Resolved means every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes, decided by swebench's own
`get_eval_tests_report` / `get_resolution_status` (so a skipped test counts as it does there: neither a success
nor a failure).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from swebench.harness import grading as sg

from swe_env import testspec
from swe_env.patching import apply_patch, reset_files
from swe_env.sandbox.base import Sandbox, SandboxError
from swe_env.sandbox.factory import SandboxConfig, open_sandbox
from tasks.schema import Task

STATUSES = ("resolved", "unresolved", "empty_patch", "patch_failed", "error")
MISSING = "MISSING"  # the test did not show up in the log
NOT_RUN = "NOT_RUN"  # the tests were not run (empty or unappliable patch)


@dataclass
class GradeConfig:
    """How grading runs."""

    backend: str = "auto"  # sandbox backend: auto, docker, bwrap, local
    sandbox: Any = None  # the backend's config (a SandboxConfig or DockerConfig/BwrapConfig/LocalConfig)
    test_timeout: float = 1800.0  # seconds the test command may run
    log_chars: int = 6000  # how much of the end of the test log the report keeps


@dataclass
class GradeReport:
    """The verdict on one patch for one task."""

    instance_id: str
    status: str  # one of STATUSES
    resolved: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)  # test -> PASSED/FAILED/ERROR/SKIPPED/MISSING/...
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    apply_method: str | None = None  # which fallback applied the model patch
    backend: str = ""  # the sandbox backend used
    test_cmd: str = ""
    test_exit_code: int | None = None
    log_excerpt: str = ""  # end of the test log (or of the apply log when the patch failed)
    error: str = ""  # why status is "error"
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def grade(task: Task, patch: str, backend: str = "auto", config: GradeConfig | None = None) -> GradeReport:
    """Grade `patch` (a unified diff against task.base_commit) on `task` in a fresh sandbox."""
    cfg = config or GradeConfig(backend=backend)
    start = time.monotonic()
    report = _new_report(task, "empty_patch", cfg)
    report.backend = "none"  # an empty patch is graded without a sandbox
    if patch.strip():
        sandbox_cfg = cfg.sandbox if cfg.sandbox is not None else SandboxConfig(install_tools=False)
        try:
            with open_sandbox(task, backend=cfg.backend, config=sandbox_cfg) as sandbox:
                report.backend = type(sandbox).__name__.removesuffix("Sandbox").lower()
                _grade_in(sandbox, task, patch, cfg, report)
        except SandboxError as exc:
            report.status, report.error = "error", str(exc)
    report.duration_s = round(time.monotonic() - start, 2)
    return report


def _new_report(task: Task, status: str, cfg: GradeConfig) -> GradeReport:
    return GradeReport(
        instance_id=task.instance_id, status=status, resolved=False, backend=cfg.backend,
        fail_to_pass=dict.fromkeys(task.fail_to_pass, NOT_RUN), pass_to_pass=dict.fromkeys(task.pass_to_pass, NOT_RUN),
        test_cmd=testspec.test_command(task),
    )  # fmt: skip


def _grade_in(sandbox: Sandbox, task: Task, patch: str, cfg: GradeConfig, report: GradeReport) -> None:
    applied = apply_patch(sandbox, patch, "model")
    report.apply_method = applied.method
    if applied.method is None:
        report.status, report.log_excerpt = "patch_failed", applied.log[-cfg.log_chars :]
        return
    if task.test_patch.strip():
        reset_files(sandbox, task.test_patch, task.base_commit)
        test_applied = apply_patch(sandbox, task.test_patch, "test", reset_between=False)
        if test_applied.method is None:
            report.status, report.error = "error", "the task's test patch does not apply on top of the model patch"
            report.log_excerpt = test_applied.log[-cfg.log_chars :]
            return
    res = sandbox.execute(report.test_cmd, timeout=cfg.test_timeout)
    report.log_excerpt = res.output[-cfg.log_chars :]
    if res.timed_out:
        report.status, report.error = "error", f"tests timed out after {cfg.test_timeout:.0f} s"
        return
    report.test_exit_code = res.returncode
    _judge(task, res.output, res.returncode, report)


def _judge(task: Task, log: str, exit_code: int, report: GradeReport) -> None:
    """Fill per-test results and the verdict from the test log."""

    status_map = testspec.log_parser(task)(log, None)
    if not status_map:
        report.status, report.error = "error", f"no test results in the log (exit code {exit_code})"
        report.fail_to_pass = dict.fromkeys(task.fail_to_pass, MISSING)
        report.pass_to_pass = dict.fromkeys(task.pass_to_pass, MISSING)
        return
    if exit_code != 0 and not any(s in ("FAILED", "ERROR") for s in status_map.values()):
        # swebench's guard: a log that reports no failure from a run that failed is not describing that run
        report.status, report.error = "error", f"test command exited {exit_code} but its log shows no failure"
        return
    report.fail_to_pass = {t: _status_of(t, status_map) for t in task.fail_to_pass}
    report.pass_to_pass = {t: _status_of(t, status_map) for t in task.pass_to_pass}
    gold = {sg.FAIL_TO_PASS: task.fail_to_pass, sg.PASS_TO_PASS: task.pass_to_pass}
    tests_report = sg.get_eval_tests_report(status_map, gold)
    report.resolved = sg.get_resolution_status(tests_report) == sg.ResolvedStatus.FULL.value
    report.status = "resolved" if report.resolved else "unresolved"


def _status_of(test: str, status_map: dict[str, str]) -> str:
    if test in status_map:
        return status_map[test]
    matches = [k for k in status_map if test.count("[") > test.count("]") and k.startswith(test)]
    return status_map[matches[0]] if matches else MISSING
