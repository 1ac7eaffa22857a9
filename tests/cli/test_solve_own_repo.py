"""`nexus-agent solve --repo PATH --issue TEXT|FILE [--test-cmd CMD]`: a real git repo with a bug and a free-text
issue, a scripted model (a recording replayed) that edits the file and finishes, in a real bubblewrap sandbox; the
user's command grades the patch by its exit code, and nothing of the repo runs on the host."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from clilib import cli_env, nexus

pytestmark = pytest.mark.usefixtures("bwrap_installed")
BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
ISSUE = "add(2, 3) returns -1 instead of 5: calc.add subtracts its arguments.\n"


def make_repo(root: Path) -> Path:
    """A committed repo with the bug, and a hook and filter that would leave a mark if git ran them on the host."""
    repo = root / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    (repo / "test_calc.py").write_text(TESTS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    mark = root / "host-ran-repo-code"
    for hook in ("post-checkout", "pre-commit", "post-merge"):
        (repo / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {mark}\n")
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    subprocess.run(["git", "config", "core.fsmonitor", f"touch {mark}; true"], cwd=repo, check=True)
    return repo


def script(path: Path, fixes: bool) -> Path:
    """A recorded trajectory whose replies view, (maybe) fix, and submit: the scripted model."""
    edit = "a + b" if fixes else "a - b  # looked"
    replies = [
        "<function=file_editor>\n<parameter=command>view</parameter>\n<parameter=path>/testbed/calc.py</parameter>\n"
        "</function>",
        "<function=file_editor>\n<parameter=command>str_replace</parameter>\n<parameter=path>/testbed/calc.py"
        f"</parameter>\n<parameter=old_str>a - b</parameter>\n<parameter=new_str>{edit}</parameter>\n</function>",
        "<function=finish>\n<parameter=command>submit</parameter>\n</function>",
    ]
    records = [{"type": "header", "version": 1, "task_id": "local__calc", "model": "scripted", "config": {}}]
    records += [{"type": "step", "step": n, "reply": r} for n, r in enumerate(replies, 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("fixes", "test_cmd", "status"),
    [(True, "python -m pytest -q test_calc.py", "resolved"), (False, "python -m pytest -q test_calc.py", "unresolved"),
     (True, None, "not_graded")],
)  # fmt: skip
def test_solve_own_repo(tmp_path: Path, fixes: bool, test_cmd: str | None, status: str) -> None:
    repo = make_repo(tmp_path)
    issue = tmp_path / "issue.md"
    issue.write_text(ISSUE)
    out = tmp_path / "run"
    grading = ["--test-cmd", test_cmd] if test_cmd else []
    res = nexus("solve", "--repo", str(repo), "--issue", str(issue), *grading, "--replay",
                str(script(tmp_path / "s.jsonl", fixes)), "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    patch = (out / "patch.diff").read_text()
    assert (report["instance_id"], report["exit_reason"], report["status"]) == ("local__calc", "agent", status)
    assert ("+    return a + b" in patch) == fixes and patch.startswith("diff --git a/calc.py b/calc.py")
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert ISSUE.strip() in steps[1]["input"][1]["content"]  # the free-text issue is the task
    assert "def add(a, b):" in steps[1]["observation"]  # the agent saw the repo's HEAD in /testbed
    said = "--test-cmd: " + test_cmd if test_cmd else "not graded: no --test-cmd"
    assert f"grading the patch ({said})" in res.stdout
    if test_cmd:
        assert report["grade"]["test_cmd"] == test_cmd and report["grade"]["test_exit_code"] == (0 if fixes else 1)
        assert ("1 passed" if fixes else "1 failed") in report["grade"]["log_excerpt"]
    else:
        assert "local__calc: not graded" in res.stdout and report["grade"]["backend"] == "none"
    assert (repo / "calc.py").read_text() == BUGGY  # the user's tree is untouched: the patch is in the run folder
    assert not (tmp_path / "host-ran-repo-code").exists()  # no hook, fsmonitor or filter of the repo ran here


def test_uncommitted_changes_stay_behind_and_are_named(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "calc.py").write_text("DIRTY = True\n")
    res = nexus("solve", "--repo", str(repo), "--issue", ISSUE, "--replay", str(script(tmp_path / "s.jsonl", True)),
                "--sandbox", "bwrap", "--out", str(tmp_path / "run"), env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "are not copied: the agent works on its HEAD commit" in " ".join(res.stdout.split())
    steps = [json.loads(line) for line in (tmp_path / "run" / "trajectory.jsonl").read_text().splitlines()]
    assert "return a - b" in steps[1]["observation"] and "DIRTY" not in steps[1]["observation"]
    assert (repo / "calc.py").read_text() == "DIRTY = True\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--issue", "x"], "--issue and --test-cmd go with --repo"),
        (["--repo", "REPO"], "--repo takes an --issue (text or file) and no task id or --dataset"),
        (["--repo", "REPO", "--issue", "  "], "--issue: the problem statement is empty"),
        (["--repo", "REPO", "--issue", "isue.md"], "--issue isue.md: no such file; give the problem statement itself"),
        (["--repo", "REPO", "--issue", "docs/bug"], "--issue docs/bug: no such file"),
        (["--repo", "REPO", "--issue", "NOGIT"], "a folder; give the problem statement, or a file holding it"),
        (["--repo", "NOGIT", "--issue", "x"], "not a git"),
        (["--repo", "HEADLINK", "--issue", "x"], "its .git/HEAD is a link out of .git, which is not followed"),
    ],
)
def test_own_repo_errors_are_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    repo, nogit = make_repo(tmp_path), tmp_path / "plain"
    nogit.mkdir()
    (tmp_path / "linked").mkdir()
    linked = make_repo(tmp_path / "linked")  # HEAD a link to a file outside .git: git would follow it, we do not
    (tmp_path / "outside-head").write_text((linked / ".git" / "HEAD").read_text())
    (linked / ".git" / "HEAD").unlink()
    (linked / ".git" / "HEAD").symlink_to(tmp_path / "outside-head")
    args = [{"REPO": str(repo), "NOGIT": str(nogit), "HEADLINK": str(linked)}.get(a, a) for a in args]
    res = nexus("solve", *args, "--out", str(tmp_path / "run"), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and says in res.stderr, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
