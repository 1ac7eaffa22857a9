"""`nexus-agent solve` as a user runs it: the real program, real tools in a real bubblewrap sandbox, real grading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, nexus

TASK = "nexus-demo__pagekit-1"
pytestmark = pytest.mark.usefixtures("bwrap_installed")


def _files(out: Path) -> tuple[dict, str, list[dict]]:
    report = json.loads((out / "report.json").read_text())
    records = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    return report, (out / "patch.diff").read_text(), records


def test_gold_replay_is_resolved(tmp_path: Path) -> None:
    out = tmp_path / "run"
    gold = GOLD_DIR / f"{TASK}.gold.jsonl"
    res = nexus("solve", TASK, "--replay", str(gold), "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{TASK}: resolved" in res.stdout
    report, patch, records = _files(out)
    assert report["resolved"] and report["status"] == "resolved" and report["exit_reason"] == "agent"
    assert report["grade"]["backend"] == "bwrap" and set(report["grade"]["fail_to_pass"].values()) == {"PASSED"}
    assert "paginator.py" in patch and report["patch_lines"] == len(patch.splitlines())
    recorded = [json.loads(line) for line in gold.read_text().splitlines() if '"type": "step"' in line]
    assert [r["reply"] for r in records if r["type"] == "step"] == [r["reply"] for r in recorded]
    assert records[-1]["type"] == "footer" and records[-1]["patch"] == patch
    assert report["config"]["max_steps"] == records[0]["config"]["max_steps_absolute"]  # the limit that applied
    modes = {name: (out / name).stat().st_mode & 0o777 for name in ("report.json", "patch.diff", "trajectory.jsonl")}
    assert len(set(modes.values())) == 1, modes  # one mode for the run's files (not 0600 for some)
    said = res.stdout  # not a terminal: plain lines, one per step, in words a user knows
    assert "step 1: file_editor: view /testbed/pagekit/paginator.py" in said
    assert "step 2: execute_bash: python3 -m pytest -q tests -> exit" in said and "step 5: finish: submit" in said
    assert "grading the patch" in said and "submitted after 5 steps" in said and "┏" not in said


def test_giving_up_is_unresolved(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = nexus("solve", "--replay", str(GOLD_DIR / "give_up.jsonl"), "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    report, patch, _ = _files(out)
    assert patch == "" and not report["resolved"] and report["status"] == "empty_patch"
    assert report["instance_id"] == "nexus-demo__semver-lite-1"  # the recording's task, as no id was given


@pytest.mark.slow
def test_local_model_runs_and_reports_cache_stats(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A (tiny, random) local model over a kvstore session: the run ends cleanly at its step limit, per-turn stats."""
    out = tmp_path / "run"
    args = ["--model", str(tiny_model_dir), "--max-steps", "2", "--max-new-tokens", "8", "--budget", "256"]
    res = nexus("solve", TASK, *args, "--sandbox", "bwrap", "--out", str(out), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    report, _, records = _files(out)
    assert report["exit_reason"] == "abs_step_limit" and report["steps"] == 2 and not report["resolved"]
    assert report["config"]["max_steps"] == 2 and "step limit reached after 2 steps" in " ".join(res.stdout.split())
    assert "step 2/2: " in res.stdout and "abs_step_limit" not in res.stdout
    turns = report["turns"]
    assert [t["turn"] for t in turns] == [1, 2] and all(0 < t["generated_tokens"] <= 8 for t in turns)
    assert turns[1]["prefill_tokens"] < turns[0]["prefill_tokens"]  # true eviction: only the new observation
    assert report["totals"]["evicted_tokens"] > 0 and all(t["held_tokens"] <= 256 + 64 for t in turns)
    assert "turn 2: prefill" in res.stdout  # the per-turn summary lines
    assert report["model_name_or_path"].startswith("nexus-agent__tiny-qwen3__nexus-agent-256")  # the default memory
    assert sum(r["type"] == "step" for r in records) == 2


@pytest.mark.parametrize(
    "options, message",
    [
        (["--model", "nosuch"], "--model nosuch: not a registered model"),
        (["--sandbox", "nosuch"], "--sandbox 'nosuch' is unknown"),
        (["--protocol", "nosuch"], "--protocol 'nosuch' is unknown"),
        (["--policy", "nosuch"], "unknown policy 'nosuch'"),
        (["--server", "http://127.0.0.1:9/v1", "--budget", "512"], "drop --budget"),
        (["--learn-profile", "--policy", "snapkv"], "--learn-profile learns a profile of the default memory"),
    ],
)
def test_a_bad_option_stops_before_anything_starts(tmp_path: Path, options: list[str], message: str) -> None:
    out = tmp_path / "run"
    res = nexus("solve", TASK, *options, "--out", str(out), env=cli_env(tmp_path), cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and message in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and res.stdout == "" and not out.exists()  # no table, no folder


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text(""), "replay is not a trajectory: it holds no record"),
        (lambda p: p.write_text("{bad\n"), "replay is not a trajectory: its only line is not a JSON record"),
        (lambda p: p.mkdir(), "replay is a folder, not a trajectory file"),
        (lambda p: p.write_text(json.dumps({"type": "header", "task_id": TASK})), "no assistant messages to replay"),
        (lambda p: shutil.copy(GOLD_DIR / "give_up.jsonl", p), "records task nexus-demo__semver-lite-1, not"),
    ],
)  # fmt: skip
def test_a_replay_that_cannot_run_stops_before_anything_starts(tmp_path: Path, make, message: str) -> None:
    """--replay is read and checked with the other options: one line, exit 2, nothing printed, no folder."""
    out, replay = tmp_path / "run", tmp_path / "replay"
    make(replay)
    res = nexus("solve", TASK, "--replay", str(replay), "--sandbox", "bwrap", "--out", str(out), env=cli_env(tmp_path),
                cwd=tmp_path, timeout=120)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr
    assert res.stderr.count("\n") == 1
    assert res.stdout == ""
    assert not out.exists()


def test_a_replay_without_a_task_id_stops_before_anything_starts(tmp_path: Path) -> None:
    """Without a task id the recording names the task: it is read as early, and as strictly."""
    out, replay = tmp_path / "run", tmp_path / "bad.jsonl"
    replay.write_text("{bad\n")
    res = nexus("solve", "--replay", str(replay), "--out", str(out), env=cli_env(tmp_path), cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "bad.jsonl is not a trajectory" in res.stderr
    assert not out.exists()


def test_a_budget_below_the_protected_opening_stops_before_anything_starts(tmp_path: Path, tiny_model_dir) -> None:
    out = tmp_path / "run"
    args = ["--model", str(tiny_model_dir), "--protect", "system+task", "--budget", "512", "--out", str(out)]
    res = nexus("solve", TASK, *args, env=cli_env(tmp_path), cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "cannot hold the protected opening" in res.stderr and not out.exists(), res.stderr
