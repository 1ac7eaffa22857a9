"""One chat per session (pipeline/chat/sessions.py `hold`): a second chat on a session another process has open is
refused in one line (two would overwrite each other's memory and requests), /sessions delete leaves it alone, and a
new chat's default name passes over it. The holder is a real second process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from clilib import cli_env, nexus

from pipeline.chat import sessions
from pipeline.chat import state as cs
from pipeline.errors import RunError

HOLDER = """\
import sys, time
from pathlib import Path
from pipeline.chat import sessions
with sessions.hold(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The session folder `s` (a saved session), held by another process's open chat."""
    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    folder = cs.session_dir("s")
    folder.mkdir(parents=True)
    cs.ChatState(repo=str(tmp_path), requests=["hello"]).save(folder)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield folder
    proc.kill()
    proc.wait()


def test_a_second_chat_on_an_open_session_is_refused(held: Path) -> None:
    with pytest.raises(RunError, match="session 's' is open in another chat"), sessions.hold(held):
        pass


def test_the_cli_refuses_it_in_one_line_with_exit_2(held: Path, tmp_path: Path) -> None:
    res = nexus("chat", "--session", "s", "--resume", "--no-env", "--message", "x", env=cli_env(tmp_path / "home"),
                cwd=tmp_path)  # fmt: skip
    assert (res.returncode, res.stderr.startswith("error: session 's' is open in another chat (pid ")) == (2, True)


def test_the_refused_chat_leaves_the_session_as_it_was(held: Path, tmp_path: Path) -> None:
    nexus("chat", "--session", "s", "--resume", "--no-env", "--message", "x", env=cli_env(tmp_path / "home"),
          cwd=tmp_path)  # fmt: skip
    assert cs.ChatState.load(held).requests == ["hello"]


def test_an_open_session_is_not_deleted_from_another_chat(held: Path) -> None:
    with pytest.raises(RunError, match="open in another chat"):
        sessions.delete("s", "other")


def test_a_chat_on_the_same_repo_under_another_session_is_named(held: Path, tmp_path: Path) -> None:
    """Two sessions on one repo may be open at once, but /undo cannot tell their edits apart: opening says so."""
    assert sessions.open_on(tmp_path, besides="t") == ["s"]
    assert sessions.open_on(tmp_path, besides="s") == [] and sessions.open_on(tmp_path / "other", besides="t") == []


def test_a_new_chat_passes_over_a_name_being_opened(held: Path) -> None:
    (held / cs.STATE_FILE).unlink()  # the other chat is still opening it: no chat.json yet
    assert sessions.new_name("s") == "s-2"


def test_a_session_that_never_started_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    with pytest.raises(RunError), sessions.hold(cs.session_dir("new")):
        raise RunError("could not start")
    assert not cs.session_dir("new").exists()


def test_a_closed_chat_releases_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    folder = cs.session_dir("s")
    with sessions.hold(folder):
        cs.ChatState(repo=str(tmp_path)).save(folder)
    assert not sessions.in_use(folder)
