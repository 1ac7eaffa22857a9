"""`--protect` on the commands that build a session: passed to the session, recorded in the run's files, and a
budget that cannot hold the protected opening is one clear line (exit 2) before any task runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clilib import cli_env, nexus

TASK = "nexus-demo__pagekit-1"
pytestmark = pytest.mark.usefixtures("bwrap_installed")


def one_line_error(res) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in res.stdout + res.stderr, res.stderr
    return lines[0]


def test_a_budget_below_the_protected_opening_is_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--budget", "256", "--protect", "system+task", "--sandbox", "bwrap"]
    env = cli_env(tmp_path)
    err = one_line_error(nexus("solve", TASK, *args, "--out", str(tmp_path / "s"), env=env, cwd=tmp_path))
    assert "cannot hold the protected opening" in err and "protect='system+task'" in err
    err = one_line_error(nexus("eval", "--instances", TASK, *args, "--out", str(tmp_path / "e"), env=env, cwd=tmp_path))
    assert "cannot hold the protected opening" in err
    assert not (tmp_path / "e").exists()  # refused before the run folder or any worker


def test_an_unknown_protect_value_is_one_line(tmp_path: Path) -> None:
    err = one_line_error(nexus("solve", "--protect", "everything", env=cli_env(tmp_path), cwd=tmp_path))
    assert "--protect 'everything': use one of system+task, system, none" in err


@pytest.mark.slow
def test_the_protection_is_in_the_report_and_the_predictions(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "run"
    args = ["--model", str(tiny_model_dir), "--max-steps", "1", "--max-new-tokens", "4", "--budget", "2048"]
    res = nexus("eval", "--instances", TASK, *args, "--protect", "system", "--sandbox", "bwrap", "--out", str(out),
                env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((out / TASK / "report.json").read_text())
    assert report["status"] != "error", report.get("error")
    assert report["config"]["protect"] == "system" and "protect system" in report["model"]
    (pred,) = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert pred["model_name_or_path"] == "nexus-agent__tiny-qwen3__nexus-agent-2048-true-eviction-protect-system"
    assert json.loads((out / "run.json").read_text())["protect"] == "system"
    again = nexus("eval", "--instances", TASK, *args, "--protect", "none", "--out", str(out),
                  env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    assert "protect: 'system' -> 'none'" in one_line_error(again)  # the run folder holds a run with other settings


def test_a_run_folder_from_before_the_option_resumes_as_unprotected(tmp_path: Path) -> None:
    from pipeline.config import RunConfig, run_memory
    from pipeline.errors import RunError
    from pipeline.eval_files import RUN_FILE, claim_out_dir

    claim_out_dir(tmp_path / "new", RunConfig())
    held = json.loads((tmp_path / "new" / RUN_FILE).read_text())
    assert held["protect"] == RunConfig().memory.protect
    old = tmp_path / "old"
    old.mkdir()
    (old / RUN_FILE).write_text(json.dumps({k: v for k, v in held.items() if k != "protect"} | {"budget": 2048}))
    # written before --protect existed: it was "none"
    claim_out_dir(old, RunConfig(memory=run_memory(budget=2048, protect="none")))
    with pytest.raises(RunError, match="protect: 'none' -> 'system'"):
        claim_out_dir(old, RunConfig(memory=run_memory(budget=2048, protect="system")))


def test_a_missing_memory_profile_is_one_line_before_any_task(tmp_path: Path) -> None:
    env, missing = cli_env(tmp_path), str(tmp_path / "none.pt")
    err = one_line_error(nexus("solve", "--memory-profile", missing, env=env, cwd=tmp_path))
    assert "--memory-profile" in err and "no such file" in err
    out = tmp_path / "e"
    err = one_line_error(
        nexus("eval", "--instances", TASK, "--memory-profile", missing, "--out", str(out), env=env, cwd=tmp_path)
    )
    assert "no such file" in err and not out.exists()
