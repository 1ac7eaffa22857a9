"""A run folder belongs to one run at a time: a second `solve` or `eval` on a folder in use is refused at once (one
line naming the folder and the holder's pid), and solve's default folders never collide. Real processes, real
bubblewrap sandboxes, replayed recordings."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clilib import GOLD_DIR, SLOW_TASK, cli_env, default_sigint, nexus, sleeping_replay

pytestmark = pytest.mark.usefixtures("bwrap_installed")


def _start(args: list[str], home: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from cli.app import main; main()", *args]
    with log.open("w") as fh:
        return subprocess.Popen(cmd, env=cli_env(home), cwd=home, start_new_session=True, preexec_fn=default_sigint,
                                stdout=fh, stderr=subprocess.STDOUT)  # fmt: skip


def _wait_for_text(log: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, f"the first run ended early:\n{log.read_text()[-2000:]}"
        assert time.monotonic() < end, f"timed out waiting for {text!r}:\n{log.read_text()[-2000:]}"
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def _refused(res: subprocess.CompletedProcess, out: Path, pid: int) -> None:
    assert res.returncode != 0, res.stdout + res.stderr
    lines = (res.stdout + res.stderr).strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and f"pid {pid}" in lines[0], res.stdout + res.stderr


@pytest.mark.slow  # two real runs, one waiting in a sandbox: ~15 s
def test_a_second_solve_on_a_folder_in_use_is_refused_at_once(tmp_path: Path) -> None:
    out, log = tmp_path / "run", tmp_path / "first.log"
    replay = sleeping_replay(tmp_path / "sleep.jsonl")
    first = _start(["solve", "--replay", str(replay), "--sandbox", "bwrap", "--out", str(out)], tmp_path, log)
    try:
        _wait_for_text(log, "agent ready", first)
        start = time.monotonic()
        second = nexus("solve", "--replay", str(GOLD_DIR / "give_up.jsonl"), "--sandbox", "bwrap", "--out", str(out),
                       env=cli_env(tmp_path), cwd=tmp_path, timeout=120)  # fmt: skip
        took = time.monotonic() - start
        _refused(second, out, first.pid)
        assert took < 10, took  # before any sandbox or grading
        assert first.poll() is None  # the first run goes on, its trajectory its own
        trajectory = (out / "trajectory.jsonl").read_text()
        assert trajectory.count('"type": "header"') == 1 and "semver-lite" in trajectory
    finally:
        _stop(first)


@pytest.mark.slow  # two real batches, one waiting in a sandbox: ~20 s
def test_a_second_eval_on_a_folder_in_use_is_refused_at_once(tmp_path: Path) -> None:
    out, log, recordings = tmp_path / "batch", tmp_path / "first.log", tmp_path / "recordings"
    recordings.mkdir()
    sleeping_replay(recordings / f"{SLOW_TASK}.jsonl")
    args = ["eval", "--replay-dir", str(recordings), "--instances", SLOW_TASK, "--sandbox", "bwrap", "--out", str(out)]
    first = _start(args, tmp_path, log)
    try:
        _wait_for_text(log, f"started {SLOW_TASK}", first)
        second = nexus(*args, env=cli_env(tmp_path), cwd=tmp_path, timeout=120)
        _refused(second, out, first.pid)
        assert not list(out.glob("*/report.json"))  # nothing ran twice, nothing finished early
    finally:
        _stop(first)


@pytest.mark.slow  # two real runs started together: ~10 s
def test_two_solves_started_together_get_their_own_default_folders(tmp_path: Path) -> None:
    args = ["solve", "--replay", str(GOLD_DIR / "give_up.jsonl"), "--sandbox", "bwrap"]
    procs = [_start(args, tmp_path, tmp_path / f"{n}.log") for n in range(2)]
    for proc in procs:
        proc.wait(timeout=180)
    logs = [(tmp_path / f"{n}.log").read_text() for n in range(2)]
    assert [p.returncode for p in procs] == [0, 0], logs
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2, folders
    for folder in folders:
        trajectory = (folder / "trajectory.jsonl").read_text()
        assert trajectory.count('"type": "header"') == 1 and (folder / "report.json").is_file()


def test_a_folder_lock_names_its_holder_and_is_released(tmp_path: Path) -> None:
    from pipeline.errors import RunError
    from pipeline.folder_lock import hold_folder

    folder = tmp_path / "run"
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom pipeline.folder_lock import hold_folder\n"
        "with hold_folder(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunError, match=f"{folder}.*pid {holder.pid}"), hold_folder(folder):
            pass
    finally:
        holder.kill()
        holder.wait()
    with hold_folder(folder), hold_folder(folder):  # free again; the same process may nest its own hold
        pass
