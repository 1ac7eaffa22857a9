"""`nexus-agent show RUN_DIR` on real run folders: a solve folder, an eval's task folder, a running or corrupt one."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, nexus

TASK = "nexus-demo__pagekit-1"
pytestmark = pytest.mark.usefixtures("bwrap_installed")


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> Path:
    """A real solve of TASK, replaying its gold recording in a bubblewrap sandbox."""
    home = tmp_path_factory.mktemp("solve")
    res = nexus("solve", "--replay", str(GOLD_DIR / f"{TASK}.gold.jsonl"), "--sandbox", "bwrap", "--out", "run",
                env=cli_env(home), cwd=home)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    return home / "run"


def _show(folder: Path, *args: str) -> tuple[int, str, str]:
    res = nexus("show", str(folder), *args, env=cli_env(folder.parent), cwd=folder.parent, timeout=120)
    return res.returncode, res.stdout, res.stderr


def test_a_solve_folder_shows_its_header_and_every_step(solved: Path) -> None:
    code, out, err = _show(solved, "--lines", "2")
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0].startswith(TASK) and lines[1].startswith("model: replay:") and "memory: nexus-agent" in lines[1]
    assert lines[2].startswith("result: resolved (submitted after 5 steps) | patch ")
    assert "step 1: file_editor command=view path=/testbed/pagekit/paginator.py" in out
    assert "step 2: execute_bash cmd=python3 -m pytest -q tests -> exit 0" in out and "step 5: finish" in out
    assert "  old_str:" in out and "more lines (--full shows them)" in out  # an edit's text as a block, cut
    assert "cache: - (no statistics: a replay or a server)" in out
    full = _show(solved, "--full")[1]
    assert "more lines (--full shows them)" not in full and "  reply:" in full and len(full) > len(out)


def test_json_carries_the_same_run_for_scripts(solved: Path) -> None:
    code, out, _ = _show(solved, "--json")
    view = json.loads(out)
    recorded = [json.loads(line) for line in (solved / "trajectory.jsonl").read_text().splitlines()]
    steps = [r for r in recorded if r["type"] == "step"]
    assert code == 0 and view["task"] == TASK and view["result"]["status"] == "resolved"
    assert [s["call"] for s in view["steps"]] == [s["call"] for s in steps]
    assert [s["observation"] for s in view["steps"]] == [s["observation"] for s in steps]  # whole, not cut
    assert view["steps"][1]["exit_code"] == "0" and view["memory"]["policy"] == "nexus-agent"


def test_a_run_without_its_report_is_shown_as_not_finished(solved: Path, tmp_path: Path) -> None:
    running = tmp_path / "running"
    running.mkdir()
    (running / "trajectory.jsonl").write_text((solved / "trajectory.jsonl").read_text())
    code, out, _ = _show(running)
    assert code == 0 and "result: none yet (no report.json: running, or stopped) after 5 steps" in out


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: None, "no such run folder"),
        (lambda d: d.mkdir(), "is not a run folder: no trajectory.jsonl or report.json in it"),
        (lambda d: (d.mkdir(), (d / "trajectory.jsonl").write_text("not json\n{}\n")), "not a JSON record"),
        (lambda d: (d.mkdir(), (d / "trajectory.jsonl").write_text(""), (d / "report.json").write_text("{")),
         "report.json is unreadable or corrupt"),
    ],
)  # fmt: skip
def test_a_missing_or_corrupt_folder_is_one_line(tmp_path: Path, make, message: str) -> None:
    folder = tmp_path / "run"
    make(folder)
    code, out, err = _show(folder)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


@pytest.mark.slow  # a real eval of one task: ~8 s
def test_an_eval_task_folder_is_shown_and_its_batch_folder_points_to_it(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    res = nexus("eval", "--replay-dir", str(GOLD_DIR), "--instances", TASK, "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    code, said, _ = _show(out / TASK)
    assert code == 0 and said.startswith(TASK) and "result: resolved" in said
    code, said, err = _show(out)
    assert code == 2 and f"is a batch of runs (an eval's --out): show one of its tasks, {out}/<id> ({TASK})" in err


@pytest.fixture(scope="module")
def failed_batch(tmp_path_factory) -> Path:
    """A real eval of TASK whose run fails before its first step (no recording in --replay-dir): the task's folder
    holds its report.json (status error) and no trajectory.jsonl."""
    home = tmp_path_factory.mktemp("failed")
    (home / "none").mkdir()
    res = nexus("eval", "--replay-dir", str(home / "none"), "--instances", TASK, "--sandbox", "bwrap", "--out", "batch",
                env=cli_env(home), cwd=home)  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    return home / "batch"


@pytest.mark.slow  # a real eval of one task: ~8 s
def test_an_eval_task_that_failed_before_its_first_step_shows_its_error(failed_batch: Path) -> None:
    code, out, err = _show(failed_batch / TASK)
    lines = out.splitlines()
    assert code == 0, err
    assert lines[0].startswith(TASK)
    assert lines[2].startswith("result: error (error after 0 steps): RunError: no recorded trajectory for " + TASK)


@pytest.mark.slow  # a real eval of one task: ~8 s
def test_an_eval_task_that_failed_gives_json_with_no_steps(failed_batch: Path) -> None:
    code, out, _ = _show(failed_batch / TASK, "--json")
    view = json.loads(out)
    assert code == 0
    assert view["task"] == TASK
    assert view["result"]["status"] == "error"
    assert view["steps"] == []


@pytest.mark.slow  # a real eval of one task: ~8 s
def test_a_batch_whose_only_task_failed_points_to_it(failed_batch: Path) -> None:
    code, _, err = _show(failed_batch)
    assert code == 2
    assert f"is a batch of runs (an eval's --out): show one of its tasks, {failed_batch}/<id> ({TASK})" in err


@pytest.mark.slow  # a (tiny, random) local model's run: ~20 s
def test_a_local_models_steps_show_their_cache(tmp_path: Path, tiny_model_dir: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--max-steps", "2", "--max-new-tokens", "8", "--budget", "256"]
    res = nexus("solve", TASK, *args, "--sandbox", "bwrap", "--out", "run", env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    turns = json.loads((tmp_path / "run" / "report.json").read_text())["turns"]
    code, out, _ = _show(tmp_path / "run")
    held = [line for line in out.splitlines() if "| cache: prefill" in line]
    assert code == 0 and len(held) == 2 and "memory: nexus-agent, budget 256" in out
    for line, turn in zip(held, turns, strict=True):
        assert f"prefill {turn['prefill_tokens']} tok" in line and f"held {turn['held_tokens']} tok/layer" in line


def test_on_a_terminal_the_run_is_paged(solved: Path) -> None:
    from clilib import Pty

    env = {k: v for k, v in cli_env(solved.parent).items() if k not in ("LESS", "PAGER", "MANPAGER")}
    term = Pty(["show", str(solved)], env={**env, "TERM": "xterm", "LINES": "24"}, cwd=solved.parent)
    term.expect("step 1", timeout=60)
    time.sleep(1)
    assert term.proc.poll() is None  # less waits for a key: the run is longer than one screen
    term.send("q")
    assert term.close() == 0
    plain = Pty(["show", str(solved), "--no-pager"], env={**env, "TERM": "xterm"}, cwd=solved.parent)
    plain.expect("step 5", timeout=60)
    assert plain.close() == 0  # without the pager it ends by itself
