"""An eval run folder records what its memory computes, defaults included (run.json's `memory`), so a resume after
an upgrade that changed a default is refused in one line instead of mixing results of two memories under one label;
a folder written before the record resumes as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clilib import cli_env, nexus

from pipeline.config import RunConfig, run_memory
from pipeline.errors import RunError
from pipeline.eval_files import RUN_FILE, claim_out_dir


def _held(out: Path) -> dict:
    return json.loads((out / RUN_FILE).read_text())


def _rewrite(out: Path, change) -> None:
    held = _held(out)
    change(held)
    (out / RUN_FILE).write_text(json.dumps(held))


def test_the_folder_records_the_default_memory_and_the_same_run_resumes(tmp_path: Path) -> None:
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))
    memory = _held(tmp_path)["memory"]
    assert memory["policy"] == "nexus-agent" and memory["prefill_slack"] == 4096 and memory["name_weight"] == 2.0
    assert "engine" not in memory  # how, not what, the cache computes
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))


def test_a_changed_default_is_refused_with_what_changed(tmp_path: Path) -> None:
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))
    _rewrite(tmp_path, lambda held: held["memory"].update(prefill_slack=0))  # as the version before the slack ran
    with pytest.raises(RunError, match=r"prefill_slack: 0 -> 4096\).*defaults changed since it started"):
        claim_out_dir(tmp_path, RunConfig(memory=run_memory()))


def test_an_option_added_since_takes_the_value_it_meant_then(tmp_path: Path) -> None:
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))
    _rewrite(tmp_path, lambda held: [held["memory"].pop(k) for k in ("prefill_slack", "name_weight")])
    with pytest.raises(RunError) as err:
        claim_out_dir(tmp_path, RunConfig(memory=run_memory()))
    assert "name_weight: 0.0 -> 2.0" in str(err.value) and "prefill_slack: 0 -> 4096" in str(err.value)


@pytest.mark.parametrize(
    ("memory", "said"),
    [({"policy": "retired-policy"}, "'retired-policy' with options this version no longer has"), ([1], "not a record")],
)
def test_an_unknown_memory_record_is_refused(tmp_path: Path, memory, said: str) -> None:
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))
    _rewrite(tmp_path, lambda held: held.update(memory=memory))
    with pytest.raises(RunError, match=said):
        claim_out_dir(tmp_path, RunConfig(memory=run_memory()))


def test_a_folder_from_before_the_record_resumes(tmp_path: Path) -> None:
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))
    _rewrite(tmp_path, lambda held: held.pop("memory"))
    claim_out_dir(tmp_path, RunConfig(memory=run_memory()))  # not known: resumes, as before the record
    assert "memory" not in _held(tmp_path)  # and the record is not made up afterwards


@pytest.mark.usefixtures("bwrap_installed")
def test_eval_says_it_in_one_line_before_any_task_runs(tmp_path: Path, tiny_model_dir: Path) -> None:
    out, task = tmp_path / "run", "nexus-demo__pagekit-1"
    args = ["eval", "--instances", task, "--model", str(tiny_model_dir), "--budget", "2048", "--sandbox", "bwrap"]
    args += ["--out", str(out)]
    claim_out_dir(out, RunConfig(memory=run_memory(model=str(tiny_model_dir), budget=2048), sandbox="bwrap"))
    _rewrite(out, lambda held: held["memory"].update(last_weight=0.0))
    res = nexus(*args, env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "last_weight: 0.0 -> 3.0" in errors[0], res.stderr
    assert "Traceback" not in res.stdout + res.stderr and not (out / task).exists()
