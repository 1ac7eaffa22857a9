"""An eval rerun on a part of its batch (other --instances, a --slice) into the same --out keeps the rest's results in
predictions.jsonl and summary.json: the earlier tasks' folders are still there, finished, and a SWE-bench submission
from --out must not lose them. An empty --instances selects nothing (it did select everything)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, nexus

from pipeline import eval_files
from pipeline.errors import RunError
from tasks import load_tasks

IDS = ["nexus-demo__pagekit-1", "nexus-demo__semver-lite-1"]


def _finished_task(out: Path, ident: str, status: str = "resolved") -> None:
    folder = eval_files.task_dir(out, ident)
    folder.mkdir(parents=True)
    report = {"instance_id": ident, "status": status, "resolved": status == "resolved", "model_name_or_path": "m"}
    (folder / "report.json").write_text(json.dumps(report))
    (folder / "patch.diff").write_text(f"patch of {ident}\n")


def _predicted(out: Path) -> list[str]:
    return [json.loads(line)["instance_id"] for line in (out / "predictions.jsonl").read_text().splitlines()]


def test_outputs_keep_the_tasks_finished_outside_the_selection(tmp_path: Path) -> None:
    tasks = {t.instance_id: t for t in load_tasks(None)}
    for ident in IDS:
        _finished_task(tmp_path, ident)
    _finished_task(tmp_path, "nexus-demo__iniconf-1", status="error")  # an error is no result, here or elsewhere
    (tmp_path / "stray").mkdir()  # a folder without a report
    summary = eval_files.write_outputs(tmp_path, [tasks[IDS[0]]], 0.0)
    assert sorted(_predicted(tmp_path)) == IDS
    assert summary["total"] == 2 and summary["finished"] == 2 and summary["resolved"] == 2
    assert summary["errors"] == {}


def test_an_empty_selection_selects_nothing() -> None:
    tasks = load_tasks(None)
    assert eval_files.select(tasks, "", None) == []
    with pytest.raises(RunError, match="--slice ''"):
        eval_files.select(tasks, None, "")


@pytest.mark.slow  # two small replayed evals: ~15 s
@pytest.mark.usefixtures("bwrap_installed")
def test_a_rerun_on_one_task_keeps_the_others_predictions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["eval", "--replay-dir", str(GOLD_DIR), "--sandbox", "bwrap", "--out", str(out)]
    first = nexus(*base, "--instances", ",".join(IDS), env=cli_env(tmp_path), cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = nexus(*base, "--instances", IDS[0], env=cli_env(tmp_path), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(_predicted(out)) == IDS
    assert "both also hold 1 task finished earlier" in " ".join(again.stdout.split())
    assert json.loads((out / "summary.json").read_text())["finished"] == len(IDS)
    empty = nexus(*base, "--instances", "", env=cli_env(tmp_path), cwd=tmp_path)
    assert empty.returncode == 2 and "no tasks selected" in empty.stderr, empty.stdout + empty.stderr
