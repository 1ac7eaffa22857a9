"""`nexus-agent eval` over built-in tasks with the replay backend: resume after a kill, Ctrl-C, Ray, its files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, default_sigint, nexus

from pipeline import eval_files
from pipeline.config import RunConfig, run_memory
from pipeline.errors import RunError
from tasks import load_tasks

IDS = ["nexus-demo__pagekit-1", "nexus-demo__semver-lite-1"]
pytestmark = pytest.mark.usefixtures("bwrap_installed")


def _eval_args(out: Path, *extra: str, ids: list[str] = IDS) -> list[str]:
    return ["eval", "--replay-dir", str(GOLD_DIR), "--instances", ",".join(ids), "--sandbox", "bwrap",
            "--out", str(out), *extra]  # fmt: skip


def _start(out: Path, home: Path, ids: list[str] = IDS, output=subprocess.DEVNULL) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", *_eval_args(out, ids=ids)]
    return subprocess.Popen(cmd, env=cli_env(home), cwd=home, start_new_session=True, preexec_fn=default_sigint,
                            stdout=output, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _reports(out: Path) -> dict[str, Path]:
    return {p.parent.name: p for p in out.glob("*/report.json")}


def _wait_for(cond, timeout: float = 240) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def _check_outputs(out: Path, expect: set[str], total: int = len(IDS)) -> list[dict]:
    """predictions.jsonl and summary.json describe exactly the finished tasks."""
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["instance_id"] for p in preds} == expect and len(preds) == len(expect)
    for p in preds:
        assert set(p) == {"instance_id", "model_name_or_path", "model_patch"}
        assert p["model_patch"] == (out / p["instance_id"] / "patch.diff").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == len(expect) and summary["total"] == total
    return preds


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_resume_after_kill_redoes_nothing_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _start(out, tmp_path)
    try:
        _wait_for(lambda: len(_reports(out)) >= 1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the eval and its workers, mid-run
        proc.wait()
    before = {k: (p.stat().st_mtime_ns, p.read_text()) for k, p in _reports(out).items()}
    assert 1 <= len(before) < len(IDS)
    res = nexus(*_eval_args(out), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(before)} finished earlier, {len(IDS) - len(before)} to run" in res.stdout
    after = _reports(out)
    assert set(after) == set(IDS)
    for ident, (mtime, text) in before.items():  # not redone: the very same file
        assert after[ident].stat().st_mtime_ns == mtime and after[ident].read_text() == text
    _check_outputs(out, set(IDS))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resolved"] == len(IDS) and summary["statuses"] == {"resolved": len(IDS)}
    again = nexus(*_eval_args(out), env=cli_env(tmp_path), cwd=tmp_path)
    assert "0 to run" in again.stdout and f"resolved {len(IDS)}/{len(IDS)}" in again.stdout


@pytest.mark.slow
def test_ctrl_c_leaves_a_consistent_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    ids = sorted(p.name.removesuffix(".gold.jsonl") for p in GOLD_DIR.glob("*.gold.jsonl"))
    log = tmp_path / "eval.log"
    with log.open("w") as output:  # every recorded task: far more work left than the signal can take to arrive
        proc = _start(out, tmp_path, ids, output)
        _wait_for(lambda: any(out.glob("*/trajectory.jsonl")))
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        assert proc.wait(timeout=120) == 130
    _check_outputs(out, set(_reports(out)), len(ids))
    assert len(_reports(out)) < len(ids)
    said = " ".join(log.read_text().split())
    n = len(_reports(out))
    assert f"interrupted: {n} finished, {len(ids) - n} left; rerun the same command to continue" in said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said  # no worker's traceback in the view


@pytest.mark.slow
def test_ray_executor(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = nexus(*_eval_args(out, "--executor", "ray", "--workers", "2"), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(_reports(out)) == set(IDS)
    _check_outputs(out, set(IDS))
    assert json.loads((out / "summary.json").read_text())["resolved"] == len(IDS)


def test_selection_and_settings_errors(tmp_path: Path) -> None:
    tasks = load_tasks(None)
    assert [t.instance_id for t in eval_files.select(tasks, ",".join(reversed(IDS)), None)] == IDS[::-1]
    assert eval_files.select(tasks, None, "1:3") == tasks[1:3]
    for instances, slice_ in (("nope", None), (None, "a:b"), (IDS[0], "0:1")):
        with pytest.raises(RunError):
            eval_files.select(tasks, instances, slice_)
    eval_files.claim_out_dir(tmp_path, RunConfig(memory=run_memory(policy="nexus")))
    eval_files.claim_out_dir(tmp_path, RunConfig(memory=run_memory(policy="nexus")))  # the same settings resume
    with pytest.raises(RunError, match="policy: 'nexus' -> 'snapkv'"):
        eval_files.claim_out_dir(tmp_path, RunConfig(memory=run_memory(policy="snapkv")))


@pytest.mark.slow  # two small evals, a replay and a task whose repository cannot be had: ~30 s
def test_an_error_is_not_a_result(tmp_path: Path) -> None:
    """A task whose run fails (its repository is missing) is listed with its reason, left out of predictions.jsonl,
    makes the exit code 1, and runs again on the next run of the same command."""
    (good,) = [t for t in load_tasks(None) if t.instance_id == IDS[1]]
    record = {k: v for k, v in vars(good).items() if v is not None and k != "source"}
    broken = record | {"instance_id": "nexus-missing__gone-1", "repo": "nexus-missing/gone"}
    source = tmp_path / "tasks.jsonl"
    source.write_text(json.dumps(record) + "\n" + json.dumps(broken) + "\n")
    args = ["eval", "--dataset", str(source), "--replay-dir", str(GOLD_DIR), "--sandbox", "bwrap"]
    env = cli_env(tmp_path) | {"NEXUS_REPO_CACHE": str(tmp_path / "no-mirrors"), "GIT_TERMINAL_PROMPT": "0"}
    out = tmp_path / "run"
    res = nexus(*args, "--out", str(out), env=env, cwd=tmp_path)
    said = " ".join(res.stdout.split())
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 task failed to run" in said and "nexus-missing__gone-1: TaskError: cannot clone" in said
    _check_outputs(out, {IDS[1]})  # predictions and summary: the finished task only
    assert json.loads((out / "summary.json").read_text())["errors"].keys() == {"nexus-missing__gone-1"}
    again = nexus(*args, "--out", str(out), env=env, cwd=tmp_path)
    assert again.returncode == 1
    assert "2 tasks, 1 finished earlier, 1 to run (1 of them failed before and run again)" in " ".join(
        again.stdout.split()
    )


def test_server_with_memory_settings_is_refused_before_any_work(tmp_path: Path) -> None:
    """Under --server the model and its cache are the server's: --policy/--budget are refused, as chat refuses them
    (one line, exit 2, no run folder), not silently ignored."""
    out = tmp_path / "run"
    args = ["eval", "--server", "http://127.0.0.1:9/v1", "--policy", "snapkv", "--budget", "512", "--out", str(out)]
    res = nexus(*args, env=cli_env(tmp_path), cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "drop --policy, --budget" in res.stderr and res.stderr.count("\n") == 1
    assert not out.exists()
