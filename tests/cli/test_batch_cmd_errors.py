"""What a newcomer's typos and odd paths get from the batch commands (grade, calibrate, solve, tasks, show,
profiles): one line on stderr, exit 2, before any sandbox, model or run starts, and nothing of theirs overwritten.
The real entry point, in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest
from clilib import cli_env, nexus

TASK_ID = "nexus-demo__semver-lite-1"


def _one_line_error(res, *words: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error:"), res.stderr
    for word in words:
        assert word in res.stderr, res.stderr


def _run(tmp_path: Path, *args: str):
    return nexus(*args, env=cli_env(tmp_path), cwd=tmp_path, timeout=120)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--sandbox", "bogus"], ["--sandbox 'bogus'", "bwrap"]),
        (["--timeout", "-5"], ["--timeout -5"]),
        (["--timeout", "0"], ["--timeout 0"]),
        (["--json", "/proc/no/report.json"], ["--json /proc/no/report.json", "cannot write"]),
    ],
)
def test_grade_refuses_a_bad_option_before_grading(tmp_path: Path, args: list[str], words: list[str]) -> None:
    res = _run(tmp_path, "grade", TASK_ID, "--patch", "gold", *args)
    _one_line_error(res, *words)
    assert "FAIL_TO_PASS" not in res.stdout  # no grading ran, no table of NOT_RUN tests


def test_grade_json_into_a_folder_and_a_patch_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    _one_line_error(_run(tmp_path, "grade", TASK_ID, "--patch", "gold", "--json", "d"), "--json d is a folder")
    _one_line_error(_run(tmp_path, "grade", TASK_ID, "--patch", "d"), "patch file d is a folder")


def test_calibrate_checks_out_and_max_tokens_before_replaying(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    res = _run(tmp_path, "calibrate", str(trace), str(trace), "--out", "/proc/no/profile.pt")
    _one_line_error(res, "--out /proc/no/profile.pt", "cannot write")
    (tmp_path / "d").mkdir()
    _one_line_error(_run(tmp_path, "calibrate", str(trace), str(trace), "--out", "d"), "--out d is a folder")
    res = _run(tmp_path, "calibrate", str(trace), str(trace), "--max-tokens", "-5")
    assert res.returncode == 2 and "--max-tokens -5: give at least 1" in res.stderr, res.stderr
    assert "left out" not in res.stderr  # refused before any conversation was read


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["t.jsonl: holds no conversation"]),
        ("garbage\n", ["t.jsonl: holds no conversation"]),  # one line that is not JSON: a trajectory cut off
        ("[1, 2]\n", ["t.jsonl:1: not a trajectory record"]),
        ("garbage\n{}\n", ["t.jsonl:1: not a JSON record"]),
    ],
)
def test_calibrate_says_why_a_file_is_not_a_conversation(tmp_path: Path, text: str, words: list[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(text)
    _one_line_error(_run(tmp_path, "calibrate", str(trace), "--out", "p.pt"), *words)
    assert not (tmp_path / "p.pt").exists()


def test_solve_refuses_an_out_folder_with_files_no_run_wrote(tmp_path: Path) -> None:
    """`solve --out` removes and rewrites report.json, patch.diff and trajectory.jsonl there: a folder with other
    files (a project, an eval's --out) is refused before anything starts, and its files are left as they were."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    (out / "report.json").write_text('{"mine": true}\n')
    res = _run(tmp_path, "solve", TASK_ID, "--out", str(out))
    _one_line_error(res, f"--out {out} is not empty and is not a run folder", "notes.txt")
    assert (out / "report.json").read_text() == '{"mine": true}\n'
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.json"]
    (tmp_path / "f").write_text("x")
    _one_line_error(_run(tmp_path, "solve", TASK_ID, "--out", "f"), "--out f is a file, not a folder")


def test_tasks_list_names_a_folder_as_a_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    _one_line_error(_run(tmp_path, "tasks", "list", "-d", "data"), "task file data is a folder")
    (tmp_path / "n.json").write_text("[3]")
    _one_line_error(_run(tmp_path, "tasks", "list", "-d", "n.json"), "record 1 is an int, not a JSON object")


def test_show_and_profiles_name_a_file_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    _one_line_error(_run(tmp_path, "show", "f"), "f is a file, not a run folder")
    _one_line_error(_run(tmp_path, "profiles", "f"), "f is a file")


@pytest.mark.parametrize("folder", ["none", "."])
def test_profiles_builtin_refuses_a_folder(tmp_path: Path, folder: str) -> None:
    """--builtin lists the shipped profiles: a folder beside it was ignored, even one that does not exist."""
    res = _run(tmp_path, "profiles", "--builtin", folder)
    _one_line_error(res, "--builtin lists the shipped profiles and takes no folder", f"(given {folder})")
    assert res.stdout == ""  # no table of the shipped profiles


def test_a_memory_profile_folder_without_profiles_is_refused(tmp_path: Path) -> None:
    """A folder with no *.pt in it gave a run no profile while its label named the folder."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "notes.json").write_text("{bad")
    res = _run(tmp_path, "solve", TASK_ID, "--memory-profile", str(folder), "--out", "run")
    _one_line_error(res, f"--memory-profile {folder}: a folder with no memory profile (*.pt) in it")
    assert not (tmp_path / "run").exists()


def test_tasks_list_on_a_narrow_terminal_keeps_whole_ids(tmp_path: Path) -> None:
    """The ids are what a user copies into solve, grade or eval: a narrow terminal squeezes the other columns."""
    from clilib import Pty

    from tasks import load_tasks

    pty = Pty(["tasks", "list"], cli_env(tmp_path) | {"COLUMNS": "50"}, tmp_path)
    seen = pty.expect("7 tasks") + pty.expect("└")
    assert pty.close() == 0
    for task in load_tasks(None):
        assert task.instance_id in seen, seen


@pytest.mark.usefixtures("bwrap_installed")
def test_a_budget_below_the_forced_blocks_is_refused_before_the_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """--budget 1 (a user meaning 100%?) was refused only after the sandbox opened and the model loaded, leaving an
    empty run folder; solve's help promises every option checked before anything starts."""
    args = ["--model", str(tiny_model_dir), "--budget", "1", "--sandbox", "bwrap"]
    res = _run(tmp_path, "solve", TASK_ID, *args, "--out", "s")
    _one_line_error(res, "budget of 1 tokens per layer", "cannot hold the forced blocks")
    assert "loading the model" not in res.stdout and not (tmp_path / "s").exists()
    res = _run(tmp_path, "eval", "--instances", TASK_ID, *args, "--out", "e")
    _one_line_error(res, "cannot hold the forced blocks")
    assert not (tmp_path / "e").exists()
