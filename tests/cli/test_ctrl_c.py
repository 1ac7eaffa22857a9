"""Ctrl-C while a command imports its libraries ends in `interrupted` (exit 130), never another error's traceback
(cli/ctrl_c.py: a Ctrl-C pressed during an import is raised once the import is done).

The subprocess tests send a real SIGINT to a real `nexus-agent solve`: at the start of a named module's import (a
meta-path finder in the child sends it: the same point on every run), or at a delay after the CLI's main() started.
Sent at numpy's import, which torch's C init runs, it was swallowed before cli/ctrl_c.py: the run went on to the end
and exited 0."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clilib import cli_env, default_sigint, sleeping_replay

from cli.app import main
from cli.ctrl_c import NOTE, waiting_for_imports
from pipeline.lifetime import Terminated

CTRL_C_AT_IMPORT = """
import os, signal, sys
class CtrlCAt:  # a real SIGINT at the start of the import of {module!r}
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, CtrlCAt())
from cli.app import main
main()
"""
TERM_AT_IMPORT = CTRL_C_AT_IMPORT.replace("signal.SIGINT", "signal.SIGTERM")
CTRL_C_AFTER = """
import os, signal, threading
from cli.app import main
threading.Timer({delay}, os.kill, (os.getpid(), signal.SIGINT)).start()  # a real SIGINT, {delay} s into main()
main()
"""


@pytest.fixture
def python_ctrl_c():
    """Python's own SIGINT handler for the test (a test run started as a background job ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


PRESS = "import os, signal\nos.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, pressed while this module imports\n"


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_ctrl_c_during_an_import_is_raised_when_the_import_is_done(tmp_path: Path, monkeypatch) -> None:
    name = _module(tmp_path, monkeypatch, "ctrl_c_in_import", PRESS + "done = True\n")
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), waiting_for_imports():
        importlib.import_module(name)
        time.sleep(10)  # the watcher sends it again within ~20 ms of the import's end
    assert sys.modules[name].done
    assert time.monotonic() - start < 5


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_sigterm_during_an_import_is_raised_as_terminated_when_the_import_is_done(
    tmp_path: Path, monkeypatch
) -> None:
    body = "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\ndone = True\n"
    name = _module(tmp_path, monkeypatch, "sigterm_in_import", body)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), waiting_for_imports():
        importlib.import_module(name)
        time.sleep(10)
    assert sys.modules[name].done
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_long_wait_is_said_once_on_stderr(tmp_path: Path, monkeypatch, capfd: pytest.CaptureFixture) -> None:
    name = _module(tmp_path, monkeypatch, "ctrl_c_in_a_long_import", PRESS + "import time\ntime.sleep(1.5)\n")
    with pytest.raises(KeyboardInterrupt), waiting_for_imports():
        importlib.import_module(name)
        time.sleep(10)
    assert capfd.readouterr().err == NOTE.format(key="Ctrl-C")


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_ctrl_c_outside_an_import_is_raised_at_once() -> None:
    ran = []
    with pytest.raises(KeyboardInterrupt), waiting_for_imports():
        os.kill(os.getpid(), signal.SIGINT)
        ran.append(True)
    assert ran == []


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_second_ctrl_c_in_the_same_import_is_raised_at_once(tmp_path: Path, monkeypatch) -> None:
    """An import that hangs can be left: the second press does not wait for it."""
    name = _module(tmp_path, monkeypatch, "ctrl_c_twice_in_import", PRESS + "first = True\n" + PRESS + "second = 1\n")
    with pytest.raises(KeyboardInterrupt), waiting_for_imports():
        importlib.import_module(name)
    assert name not in sys.modules


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_ctrl_c_that_waited_is_raised_once(tmp_path: Path, monkeypatch) -> None:
    name = _module(tmp_path, monkeypatch, "ctrl_c_once", PRESS)
    raised = 0
    with waiting_for_imports():
        for _ in range(2):  # the raise, then 0.5 s in which no second one may come
            try:
                importlib.import_module(name)
                time.sleep(0.5)
            except KeyboardInterrupt:
                raised += 1
    assert raised == 1


class PressedInFinalizer:
    """Ctrl-C pressed while a finalizer runs: Python prints an exception raised there ("Exception ignored in") and
    goes on, so the KeyboardInterrupt raised there was lost and the run went on as if no key had been pressed."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))  # the handler runs here, inside the finalizer


@pytest.mark.usefixtures("python_ctrl_c")
def test_a_ctrl_c_raised_where_errors_are_ignored_is_raised_again(capfd: pytest.CaptureFixture) -> None:
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), waiting_for_imports():
        PressedInFinalizer()  # dropped at once: its finalizer runs
        time.sleep(10)
    assert time.monotonic() - start < 5
    assert "Exception ignored" not in capfd.readouterr().err


@pytest.mark.usefixtures("python_ctrl_c")
def test_other_ignored_errors_are_still_said() -> None:
    seen = []
    previous, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with waiting_for_imports():
            sys.unraisablehook(type("Unraisable", (), {"exc_value": ValueError("x")})())
    finally:
        sys.unraisablehook = previous
    assert [type(u.exc_value) for u in seen] == [ValueError]


@pytest.mark.usefixtures("python_ctrl_c")
def test_the_previous_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with waiting_for_imports():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.usefixtures("python_ctrl_c")
def test_the_entry_point_puts_the_sigint_handler_back(monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(sys, "argv", ["nexus-agent", "--help"])
    with pytest.raises(SystemExit):
        main()
    assert signal.getsignal(signal.SIGINT) is before


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    """A CLI started with SIGINT ignored (a background job of a shell) keeps it ignored."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with waiting_for_imports():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_console_script_imports_nothing_heavy_before_it_holds_ctrl_c() -> None:
    """A batch's spawned workers import the console script again as their main module: it stays light."""
    code = "import sys, cli.entry; print(sorted(m for m in ('typer', 'click', 'rich', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_a_ctrl_c_while_the_cli_itself_imports_is_interrupted(tmp_path: Path) -> None:
    """Pressed in the first tenths of a second (typer, click and rich import), Ctrl-C showed Python's own
    KeyboardInterrupt traceback: the CLI's handling had not begun."""
    code = CTRL_C_AT_IMPORT.format(module="typer").replace("from cli.app import main", "from cli.entry import main")
    res = subprocess.run([sys.executable, "-c", code, "--help"], env=cli_env(tmp_path), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, preexec_fn=default_sigint)  # fmt: skip
    assert (res.returncode, res.stderr.splitlines()[-1:], res.stdout) == (130, ["interrupted"], ""), res.stderr
    assert "Traceback" not in res.stderr


def test_a_ctrl_c_while_the_cli_itself_imports_says_so_in_json(tmp_path: Path) -> None:
    """No command has read its options yet: the command line's --json is taken at its word."""
    code = CTRL_C_AT_IMPORT.format(module="typer").replace("from cli.app import main", "from cli.entry import main")
    args = [sys.executable, "-c", code, "tasks", "list", "--json"]
    res = subprocess.run(args, env=cli_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         preexec_fn=default_sigint)  # fmt: skip
    assert json.loads(res.stdout) == {"error": {"type": "interrupted", "message": "interrupted", "exit_code": 130}}


CTRL_C_AT_EXIT = """
import atexit, os, signal, time
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(2)))  # runs after the command's own
from cli.entry import main
main()
"""


def test_a_ctrl_c_while_the_process_exits_ends_it_at_once(tmp_path: Path) -> None:
    """Pressed while atexit callbacks run (torch clears its caches there), Ctrl-C printed "Exception ignored in
    atexit callback" and a traceback."""
    args = [sys.executable, "-c", CTRL_C_AT_EXIT, "tasks", "list", "--json"]
    res = subprocess.run(args, env=cli_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         preexec_fn=default_sigint)  # fmt: skip
    assert (res.returncode, res.stderr) == (130, "")
    assert json.loads(res.stdout)  # the command's output was out before the exit


def interrupted(code: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`nexus-agent ARGS` run by `code`, which sends SIGINT (--out: a folder of tmp_path)."""
    cmd = [sys.executable, "-c", code, *args, "--out", str(tmp_path / "run")]
    return subprocess.run(cmd, env=cli_env(tmp_path / "home"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, preexec_fn=default_sigint)  # fmt: skip


def solve_interrupted(code: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`nexus-agent solve` (the built-in task, the default tiny model, offline) run by `code`, which sends SIGINT."""
    return interrupted(code, tmp_path, "solve", *args)


@pytest.mark.parametrize("module", ["numpy", "transformers"])
def test_solve_interrupted_while_a_library_imports(tmp_path: Path, module: str) -> None:
    """numpy: imported by torch's C init, which swallowed the KeyboardInterrupt (the run went on, exit 0)."""
    res = solve_interrupted(CTRL_C_AT_IMPORT.format(module=module), tmp_path)
    assert (res.returncode, res.stderr.splitlines()[-1:]) == (130, ["interrupted"]), res.stdout + res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow  # three runs of a few seconds; before cli/ctrl_c.py most of them passed too
@pytest.mark.parametrize("delay", [0.2, 1.0, 2.5])
def test_solve_interrupted_while_it_starts(tmp_path: Path, delay: float) -> None:
    res = solve_interrupted(CTRL_C_AFTER.format(delay=delay), tmp_path)
    assert (res.returncode, "Traceback" in res.stderr) == (130, False), res.stdout + res.stderr


def test_solve_json_interrupted_says_so_on_stdout(tmp_path: Path) -> None:
    res = solve_interrupted(CTRL_C_AT_IMPORT.format(module="numpy"), tmp_path, "--json")
    assert json.loads(res.stdout) == {"error": {"type": "interrupted", "message": "interrupted", "exit_code": 130}}


def test_solve_json_terminated_says_so(tmp_path: Path) -> None:
    """SIGTERM (`timeout`, `kill`, a service manager) ends the command as Ctrl-C does, with its own word and 143."""
    res = solve_interrupted(TERM_AT_IMPORT.format(module="numpy"), tmp_path, "--json")
    assert json.loads(res.stdout) == {"error": {"type": "interrupted", "message": "terminated", "exit_code": 143}}
    assert (res.returncode, res.stderr.splitlines()[-1:]) == (143, ["terminated"]), res.stderr


@pytest.mark.usefixtures("bwrap_installed")
def test_solve_terminated_mid_step_ends_its_trajectory(tmp_path: Path) -> None:
    """SIGTERM while a step's command runs: the sandbox stops and the trajectory gets its footer, as on Ctrl-C
    (before, the process exited 143 with neither the footer nor a word)."""
    replay, out = sleeping_replay(tmp_path / "sleep.jsonl"), tmp_path / "run"
    cmd = [sys.executable, "-c", "from cli.entry import main; main()", "solve", "--replay", str(replay),
           "--sandbox", "bwrap", "--out", str(out), "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=cli_env(tmp_path / "home"), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)  # fmt: skip
    while "agent ready" not in proc.stderr.readline():  # progress goes to stderr under --json
        assert proc.poll() is None, proc.stderr.read()
    time.sleep(1.0)  # step 1's `sleep 60` runs
    proc.send_signal(signal.SIGTERM)
    said, err = proc.communicate(timeout=60)
    footer = json.loads((out / "trajectory.jsonl").read_text().splitlines()[-1])
    assert (proc.returncode, err.splitlines()[-1:]) == (143, ["terminated"]), err
    assert json.loads(said)["error"]["exit_code"] == 143
    assert (footer["type"], footer["exit_reason"], footer["error"]) == ("footer", "interrupted", "Terminated")


@pytest.mark.slow  # a batch starts its workers
def test_eval_interrupted_while_its_workers_start(tmp_path: Path) -> None:
    """Pressed as eval starts its manager and workers, Ctrl-C printed their tracebacks: a worker's KeyboardInterrupt
    inside its imports (its handler was set after them), the manager's BrokenPipeError (its parent stopped
    listening mid-handshake)."""
    args = ["eval", "--instances", "nexus-demo__pagekit-1", "--out", str(tmp_path / "run")]
    cmd = [sys.executable, "-c", "from cli.entry import main; main()", *args]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(cmd, env=cli_env(tmp_path / "home"), cwd=tmp_path, **pipes, start_new_session=True,
                            preexec_fn=default_sigint)  # fmt: skip
    assert proc.stdout.readline().startswith("eval: 1 task")  # said just before the workers start
    time.sleep(0.5)  # the workers are importing
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err


@pytest.mark.slow  # a worker loads the model
@pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_eval_interrupted_while_it_runs_says_what_is_left(tmp_path: Path, stop: int, code: int) -> None:
    """Pressed once the imports are done, while a task runs, Ctrl-C ends eval as before cli/ctrl_c.py: its own line
    (what finished, what is left), exit 130; under --json the same words on stdout. SIGTERM, sent to the eval
    process alone (as `kill` or a service manager sends it), ends it the same way with exit 143."""
    args = ["eval", "--instances", "nexus-demo__pagekit-1", "--out", str(tmp_path / "run"), "--json"]
    cmd = [sys.executable, "-c", "from cli.app import main; main()", *args]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(cmd, env=cli_env(tmp_path / "home"), cwd=tmp_path, **pipes, start_new_session=True,
                            preexec_fn=default_sigint)  # fmt: skip
    seen = [proc.stderr.readline() for _ in range(2)]  # "eval: 1 task ...", then "started nexus-demo__pagekit-1 ..."
    if stop == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # the whole process group, as a terminal's Ctrl-C
    else:
        proc.send_signal(stop)
    out, err = proc.communicate(timeout=120)
    said = "interrupted: 0 finished, 1 left; rerun the same command to continue"
    assert seen[1].startswith("started nexus-demo__pagekit-1"), seen
    assert json.loads(out) == {"error": {"type": "interrupted", "message": said, "exit_code": code}}
    assert (proc.returncode, err.splitlines()) == (code, [said])
