"""`solve --repo PATH --issue TEXT|FILE [--test-cmd CMD]`: the agent on the user's own repository and problem.

The repository's HEAD commit goes into a private repo cache as a git bundle, made by the project's safe git
(swe_env.safegit: none of the repository's config, hooks or filters run on the host), and every sandbox (the
agent's, then grading's) checks it out as it would a task's mirror. Uncommitted changes are not copied. Grading
is the user's command: the patch is applied in a fresh sandbox and the command's exit code is the verdict (0:
resolved); without one the report says "not graded".
"""

from __future__ import annotations

import copy
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.errors import RunError
from swe_env.grading import GradeReport
from swe_env.patching import apply_patch
from swe_env.safegit import GitError, head_left_out, run_git
from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.factory import SandboxConfig, open_sandbox
from tasks.schema import Task

SOURCE_PREFIX = "repo:"  # Task.source of a user's repo: grading runs the user's command, not SWE-bench's parser
NOT_GRADED = "not_graded"  # the status of a run given no --test-cmd


@dataclass(frozen=True)
class OwnRepo:
    """What the user asked to solve: a local git repository, an issue, a test command (or none)."""

    path: Path  # the repository's work tree (its HEAD commit is what the agent gets)
    issue: str  # the problem statement: the text, or a file holding it
    test_cmd: str | None = None  # run in /testbed after the patch; exit code 0 = resolved; None: not graded


# One word that reads as a file's name (a text file's suffix, or a path with a slash): a file meant, not the text.
_FILE_NAME = re.compile(r"\S+\.(?:md|markdown|txt|text|rst)|\S*/\S*", re.I)


def issue_text(value: str) -> str:
    """--issue: the text of the file it names, else the text itself; RunError when it is empty, names a folder, or
    reads as a file's name that does not exist (`isue.md`: a typo would have become the whole problem statement)."""
    path = Path(value).expanduser()
    try:
        named = len(value) < 4096  # longer than any path: only text
        if named and path.is_dir():
            raise RunError(f"--issue {value}: a folder; give the problem statement, or a file holding it")
        is_file = named and path.is_file()
        text = path.read_text(encoding="utf-8", errors="replace") if is_file else value
    except OSError as exc:
        raise RunError(f"--issue {value}: cannot read it ({exc.strerror})") from None
    if not is_file and _FILE_NAME.fullmatch(value.strip()):
        raise RunError(f"--issue {value}: no such file; give the problem statement itself, or a file that exists")
    if not text.strip():
        raise RunError("--issue: the problem statement is empty")
    return text


@contextmanager
def own_task(own: OwnRepo, cfg: RunConfig) -> Iterator[tuple[Task, RunConfig, str]]:
    """The task of `own`, the run's config with the repo cache its sandboxes check it out from (a copy; the cache is
    removed afterwards), and a note for the user ("" or what was not copied)."""
    issue = issue_text(own.issue)  # the cheap mistakes first
    repo = own.path.expanduser().resolve()
    head, dirty = _head(repo, own.path)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", repo.name).lstrip(".") or "repo"
    cache = Path(tempfile.mkdtemp(prefix="nexus-own-repo-"))
    try:
        _bundle(repo, cache / f"local__{name}.bundle", own.path)
        source = f"{SOURCE_PREFIX}{repo}"
        task = Task(f"local__{name}", f"local/{name}", head, issue, test_cmd=own.test_cmd, source=source)
        note = f"uncommitted changes in {repo} are not copied: the agent works on its HEAD commit" if dirty else ""
        own_cfg = copy.copy(cfg)  # the same settings, once validated; only the repo's source differs
        own_cfg.repo_cache = cache
        yield task, own_cfg, note
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _head(repo: Path, given: Path) -> tuple[str, bool]:
    """The HEAD commit of `repo`, and whether its tracked files differ from it; through safe git only."""

    try:
        head = run_git(repo, "rev-parse", "--verify", "HEAD^{commit}")
        dirty = run_git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    except GitError as exc:
        raise RunError(f"--repo {given}: {exc}") from None
    if head.returncode != 0 and head_left_out(repo):
        raise RunError(f"--repo {given}: its .git/HEAD is a link out of .git, which is not followed (make it a file)")
    if head.returncode != 0:
        raise RunError(f"--repo {given}: not a git repository with a commit (git init, then commit your files)")
    return head.stdout.strip(), bool(dirty)


def _bundle(repo: Path, bundle: Path, given: Path) -> None:
    """The HEAD commit and its history as one bundle file, which the sandboxes unpack like a task's mirror."""

    made = run_git(repo, "bundle", "create", str(bundle), "HEAD", timeout=600)
    if made.returncode != 0:
        raise RunError(f"--repo {given}: git bundle failed: {made.stderr.strip()[-300:]}")


def is_own(task: Task) -> bool:
    return task.source.startswith(SOURCE_PREFIX)


def grade_own(task: Task, patch: str, sandbox: str, repo_cache: Path | None, timeout: float) -> GradeReport:
    """The user's test command on the patched repo in a fresh sandbox: resolved when it exits 0; "not graded"
    without one; empty_patch, patch_failed and error as SWE-bench-style grading says them."""

    start = time.monotonic()
    report = GradeReport(task.instance_id, NOT_GRADED, False, backend="none", test_cmd=task.test_cmd or "")
    if task.test_cmd and not patch.strip():
        report.status = "empty_patch"
    elif task.test_cmd:
        try:
            with open_sandbox(task, sandbox, SandboxConfig(repo_cache=repo_cache, install_tools=False)) as box:
                report.backend = type(box).__name__.removesuffix("Sandbox").lower()
                _run_tests(box, patch, task.test_cmd, timeout, report, apply_patch)
        except SandboxError as exc:
            report.status, report.error = "error", str(exc)
    report.duration_s = round(time.monotonic() - start, 2)
    return report


def _run_tests(box, patch: str, test_cmd: str, timeout: float, report: GradeReport, apply_patch) -> None:
    applied = apply_patch(box, patch, "model")
    report.apply_method = applied.method
    if applied.method is None:
        report.status, report.log_excerpt = "patch_failed", applied.log[-6000:]
        return
    res = box.execute(test_cmd, timeout=timeout)
    report.log_excerpt = res.output[-6000:]
    if res.timed_out:
        report.status, report.error = "error", f"--test-cmd timed out after {timeout:.0f} s"
        return
    report.test_exit_code = res.returncode
    report.resolved = res.returncode == 0
    report.status = "resolved" if report.resolved else "unresolved"
