"""eval against bad files in --out (one-line errors, nothing overwritten) and a SIGKILL of the parent alone
(no orphan workers, no git helpers, temp folders reclaimed by the next run's start-up sweep)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, nexus

from pipeline import eval_files as ef
from pipeline.config import RunConfig
from pipeline.errors import RunError

IDS = ["nexus-demo__pagekit-1", "nexus-demo__semver-lite-1"]


def _args(out: Path) -> list[str]:
    return [
        "eval",
        "--replay-dir",
        str(GOLD_DIR),
        "--instances",
        ",".join(IDS),
        "--sandbox",
        "bwrap",
        "--out",
        str(out),
    ]


@pytest.mark.parametrize("content", [b"{}", b"[]", b"\xff\xfe not UTF-8", b'{"instance_id": "other", "status": "x"}'])
def test_a_bad_report_means_unfinished(tmp_path: Path, content: bytes) -> None:
    folder = ef.task_dir(tmp_path, IDS[0])
    folder.mkdir(parents=True)
    (folder / "report.json").write_bytes(content)
    assert ef.read_report(tmp_path, IDS[0]) is None
    ef.write_outputs(tmp_path, [], 0.0)  # summaries ignore it instead of crashing


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda out: out.write_text("x"), "is a file, not a folder"),
        (lambda out: (out / "predictions.jsonl").mkdir(parents=True), "is a folder where this run writes a file"),
        (lambda out: (out.mkdir(), (out / "run.json").write_text("{corrupt")), "run.json is unreadable or corrupt"),
        (lambda out: (out.mkdir(), (out / "run.json").write_text("[1, 2]")), "is not a run record"),
        (lambda out: (out.mkdir(), (out / "run.json").write_bytes(b"\xff\xfe")), "run.json is unreadable or corrupt"),
        (lambda out: (out.mkdir(), (out / "predictions.jsonl").write_text('{"model_name_or_path": "other"}\n')),
         "holds no run.json"),
    ],
)  # fmt: skip
def test_out_folders_that_are_refused(tmp_path: Path, setup, message: str) -> None:
    out = tmp_path / "out"
    setup(out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} if out.is_dir() else None
    with pytest.raises(RunError, match=message):
        ef.claim_out_dir(out, RunConfig())
    if before is not None:  # nothing there was overwritten
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_refusal_is_one_line_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.jsonl").write_text('{"model_name_or_path": "another-model"}\n')
    res = nexus(*_args(out), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error:") and res.stderr.count("\n") == 1, res.stderr
    assert (out / "predictions.jsonl").read_text() == '{"model_name_or_path": "another-model"}\n'


@pytest.mark.parametrize("command", ["solve", "eval"])
def test_an_unknown_policy_stops_before_any_work(tmp_path: Path, command: str) -> None:
    """A typo in --policy is one line naming the known policies: no sandbox, no run folder, no errored batch."""
    out = tmp_path / "out"
    args = [command, "--policy", "h2o-typo", "--sandbox", "bwrap", "--out", str(out)]
    args += ["--instances", IDS[0]] if command == "eval" else [IDS[0]]
    res = nexus(*args, env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stdout + res.stderr
    assert res.stderr.startswith("error: unknown policy 'h2o-typo'; known policies: full,")
    assert "nexus-agent" in res.stderr
    assert not out.exists()


def _kill_all(tag: str) -> None:
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and tag.encode() in (proc / "environ").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue


def _processes_with(tag: str) -> list[str]:
    """Command lines of live processes whose environment holds `tag` (zombies and this process excluded)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if tag.encode() in (proc / "environ").read_bytes() and " Z " not in (proc / "stat").read_text():
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_kill_9_of_the_parent_leaves_no_orphans_and_the_next_run_sweeps(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    probe = f"NEXUS_ORPHAN_PROBE={uuid.uuid4().hex}"
    env = {**cli_env(tmp_path), "TMPDIR": str(tmp), "NEXUS_ORPHAN_PROBE": probe.split("=")[1]}
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", "from cli.app import main; main()", *_args(out), "--workers", "2"]
    log = (tmp_path / "eval.log").open("w")
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=log)
    try:
        end = time.monotonic() + 240
        while not any(out.glob("*/trajectory.jsonl")):
            assert time.monotonic() < end and proc.poll() is None, (tmp_path / "eval.log").read_text()[-2000:]
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)  # the parent alone: its workers must notice and go
        proc.wait()
    end = time.monotonic() + 10
    while _processes_with(probe) and time.monotonic() < end:
        time.sleep(0.2)
    orphans = _processes_with(probe)
    _kill_all(probe)  # a failing run must not leave its orphans on the machine
    assert orphans == []
    res = nexus(*_args(out), env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {p.parent.name for p in out.glob("*/report.json")} == set(IDS)
    assert sorted(p.name for p in tmp.iterdir()) == []  # the killed run's folders were swept, this run's removed
    assert json.loads((out / "summary.json").read_text())["finished"] == len(IDS)


def test_a_task_folder_stays_inside_the_eval_folder(tmp_path: Path) -> None:
    from pipeline.eval_files import task_dir

    for ident in ("..", ".", "", ".hidden", "a/../../b"):
        folder = task_dir(tmp_path, ident)
        assert folder.parent == tmp_path and folder.name not in (".", "..") and not folder.name.startswith(".")
    assert task_dir(tmp_path, "django__django-11099").name == "django__django-11099"
