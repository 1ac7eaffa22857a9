"""chat's workflow on a real repo in a real bubblewrap sandbox, with a scripted model: the diff before an edit is
approved and after the turn, /undo (changed, new and deleted files), the output that shows the failing line,
/show, Ctrl-C at the approval prompt, the quit words, /sessions."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from chatlib import CALC, TEST_CALC, bash, call, failing_repo, finish, open_chat, shown

from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
EDIT = {"command": "str_replace", "path": "/testbed/calc.py", "old_str": "return a - b", "new_str": "return a + b"}
FIX = call("file_editor", **EDIT)
NEW = call("file_editor", command="create", path="/testbed/notes/new.txt", file_text="made by the agent\n")
TRACEBACK = "import sys\nfor i in range(60): print('line', i)\nraise ValueError('the real error')"


def test_edit_diff_turn_diff_and_undo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = failing_repo(tmp_path)
    (repo / "scratch.txt").write_text("untracked, kept\n")
    replies = [FIX, NEW, bash("rm test_calc.py && echo removed"), finish("fixed add")]
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, replies, sandbox, yolo=False)
        monkeypatch.setattr("builtins.input", lambda prompt="": "y")
        chat.request("fix add")
        out = shown(chat)
        preview = out.index("the edit's diff:")
        assert out.index("-    return a - b", preview) < out.index("+    return a + b", preview)
        assert "+++ b/notes/new.txt" in out and "+made by the agent" in out  # the create's diff, before it ran
        turn = out.index("this turn's diff")
        assert "-    assert add(2, 3) == 5" in out[turn:] and "+    return a + b" in out[turn:]
        assert (repo / "calc.py").read_text() != CALC and not (repo / "test_calc.py").exists()

        from cli.chat_commands import run_command

        run_command(chat, "/undo")
        said = shown(chat)
        assert "restored 2: calc.py, test_calc.py" in said and "removed 1 new: notes/new.txt" in said
        assert (repo / "calc.py").read_text() == CALC and (repo / "test_calc.py").read_text() == TEST_CALC
        assert not (repo / "notes").exists() and (repo / "scratch.txt").read_text() == "untracked, kept\n"
        assert "undid every change" in cs.ChatState.load(chat.runner.folder).notice  # told to the model next time
        message = cs.request_message("next", False, "", "/testbed", chat.runner.state.notice)
        assert "calc.py" in message["content"] and message["content"].index("undid") < message["content"].index("next")
        run_command(chat, "/undo")
        assert "nothing to undo" in shown(chat)
        chat.runner.writer.close()


def test_failing_line_shows_and_show_prints_everything(tmp_path: Path) -> None:
    repo = failing_repo(tmp_path)
    (repo / "long.py").write_text(TRACEBACK)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [bash("python3 long.py"), finish()], sandbox)
        chat.request("run long.py")
        out = shown(chat)
        assert "(exit 1)" in out and "ValueError: the real error" in out and "Traceback" in out
        assert "lines hidden (/show 1)" in out and "line 30" not in out and "[STDOUT]" not in out
        from cli.chat_commands import run_command

        run_command(chat, "/show 1")
        full = shown(chat)
        assert all(f"line {i}\n" in full for i in range(60)) and "ValueError: the real error" in full
        run_command(chat, "/show 7")
        assert "no step 7" in shown(chat)
        chat.runner.writer.close()


def test_ctrl_c_at_the_prompt_declines_then_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.protocols import ToolCall

    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [], sandbox, yolo=False)

        def press_ctrl_c(prompt: str = "") -> str:
            raise KeyboardInterrupt

        monkeypatch.setattr("builtins.input", press_ctrl_c)
        rm = ToolCall("execute_bash", {"cmd": "rm calc.py"})
        assert "declined" in chat.runner.confirm(rm)  # the first Ctrl-C cancels this call only
        with pytest.raises(cs.StopTurn):
            chat.runner.confirm(rm)  # a second one stops the turn
        assert (repo / "calc.py").exists()
        chat.runner.writer.close()


def test_sigterm_at_a_prompt_ends_the_chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C at a prompt declines the call or asks for `exit`; SIGTERM there (`Terminated`) ends the chat."""
    from agent.protocols import ToolCall
    from pipeline.lifetime import Terminated

    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(tmp_path / "session", repo, [], sandbox, yolo=False)

        def terminated(prompt: str = "") -> str:
            raise Terminated

        monkeypatch.setattr("builtins.input", terminated)
        with pytest.raises(Terminated):
            chat.runner.confirm(ToolCall("execute_bash", {"cmd": "rm calc.py"}))
        with pytest.raises(Terminated):
            chat.run()
        chat.runner.writer.close()


def test_quit_words_end_the_chat_without_a_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = failing_repo(tmp_path)
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        for word in ("exit", "quit", "/quit"):
            chat = open_chat(tmp_path / "session", repo, [], sandbox)
            monkeypatch.setattr("builtins.input", lambda prompt="", w=word: w)
            chat.run()  # returns: nothing was asked of the (empty) scripted model
            assert chat.runner.state.requests == [] and "is not kept" in shown(chat)


def test_sessions_list_delete_and_new_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.chat_commands import run_command
    from pipeline.chat import sessions as chat_sessions

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    repo = failing_repo(tmp_path)
    for name, requests in (("calc", ["a"]), ("calc-2", ["a", "b"]), ("other", [])):
        folder = cs.session_dir(name)
        folder.mkdir(parents=True)
        cs.ChatState(repo=str(repo if name != "other" else tmp_path), requests=requests).save(folder)
    assert chat_sessions.new_name("calc") == "calc-3" and chat_sessions.new_name("fresh") == "fresh"
    assert [s.name for s in chat_sessions.sessions_of(repo)] == ["calc-2", "calc"]  # most recent first
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(cs.session_dir("calc-3"), repo, [], sandbox)
        chat.runner.name = "calc-3"
        run_command(chat, "/sessions")
        listed = shown(chat)
        assert "calc-2  2 request(s)" in listed and "calc-3  0 request(s)" in listed and "other" not in listed
        assert listed.index("calc-3") < listed.index("(this chat)") < listed.index("calc-2")
        run_command(chat, "/sessions delete calc-3")
        assert "this chat's own" in shown(chat) and cs.session_dir("calc-3").exists()
        run_command(chat, "/sessions delete calc")
        assert "deleted session calc" in shown(chat) and not cs.session_dir("calc").exists()
        run_command(chat, "/sessions delete nope")
        assert "no chat session 'nope'" in shown(chat)
        chat.runner.writer.close()


def test_a_session_named_with_a_space_is_deleted_quoted_or_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repo folder "my calc" names its sessions "my calc", "my calc-2": /sessions delete could name neither."""
    from cli.chat_commands import run_command

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    repo = failing_repo(tmp_path)
    for name in ("my calc", "my calc-2"):
        cs.session_dir(name).mkdir(parents=True)
        cs.ChatState(repo=str(repo), requests=["a"]).save(cs.session_dir(name))
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        chat = open_chat(cs.session_dir("this"), repo, [], sandbox)
        run_command(chat, '/sessions delete "my calc"')
        run_command(chat, "/sessions delete my calc-2")
        said = shown(chat)
        chat.runner.writer.close()
    assert "deleted session my calc (" in said
    assert "deleted session my calc-2 (" in said


def test_resume_never_picks_a_session_with_no_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat killed before its first request leaves an empty session, the most recent one: --resume opened it (an
    empty history) instead of the session with the work."""
    from pipeline.chat.opening import session_name
    from pipeline.chat.settings import ChatSettings

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    repo = failing_repo(tmp_path)
    for name, requests in (("calc", ["fix it"]), ("calc-2", [])):  # calc-2 saved last: the most recent
        cs.session_dir(name).mkdir(parents=True)
        cs.ChatState(repo=str(repo), requests=requests).save(cs.session_dir(name))
        time.sleep(0.05)
    assert session_name(ChatSettings(repo=repo, resume=True)) == ("calc", "")


def _pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pytest/", timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow  # builds a virtualenv with pytest from PyPI (~10 s)
def test_the_sandbox_runs_the_repos_tests(tmp_path: Path) -> None:
    from contextlib import nullcontext

    from pipeline.chat import env as chat_env
    from swe_env.pyenv import PyEnvConfig

    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable: the repo's env cannot be built")
    repo = failing_repo(tmp_path)
    cfg = PyEnvConfig(cache_dir=tmp_path / "envs")
    env = chat_env.ensure(repo, cfg, lambda text: nullcontext())
    assert chat_env.ensure(repo, cfg, lambda text: pytest.fail("rebuilt")).key == env.key  # cached
    with cs.open_repo_sandbox(repo, "t", env) as sandbox:
        chat = open_chat(tmp_path / "session", repo, [bash("python -m pytest -q"), finish()], sandbox)
        chat.request("run the tests")
        out = shown(chat)
    assert "FAILED test_calc.py::test_add - assert -1 == 5" in out and "(exit 1)" in out
    assert "E       assert -1 == 5" in out
    assert env.key.startswith("chat__shared__")  # not a package: shared by the repos of the same requirements
    (repo / "requirements.txt").write_text("iniconfig\n")  # other requirements: another env
    newer = chat_env.ensure(repo, cfg, lambda text: nullcontext())
    assert newer.key != env.key and (newer.path / "bin" / "pytest").exists()
