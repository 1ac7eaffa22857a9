"""`nexus-agent chat` driven through a pseudo-terminal: requests on one persistent session, Ctrl-C, quit, resume.

The model is a tiny random Qwen3 saved to disk: whatever it writes, the session, the cache and the files must
hold together.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from clilib import Pty, cli_env

from agent.protocols import ToolCall
from kvstore.session.persist import read_session_file
from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _chat(tmp_path: Path, model: Path, *args: str) -> Pty:
    base = ["chat", "--session", "s", "--model", str(model), "--max-steps", "1", "--max-new-tokens", "6", "--yolo"]
    return Pty([*base, *args], cli_env(tmp_path / "home"), tmp_path)


def _ask(chat: Pty, text: str) -> str:
    chat.send(text)
    return ANSI.sub("", chat.expect("you> "))


def _saved(tmp_path: Path) -> tuple[dict, dict]:
    folder = tmp_path / "home" / "sessions" / "s"
    doc, _ = read_session_file(folder / cs.SESSION_FILE)
    return doc, json.loads((folder / cs.STATE_FILE).read_text())


def _user_texts(doc: dict) -> str:
    return "\n".join(m["content"] for m in doc["messages"] if m["role"] == "user")


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_two_requests_quit_resume_third_sees_the_history(tmp_path: Path, repo: Path, tiny_model_dir: Path) -> None:
    chat = _chat(tmp_path, tiny_model_dir, "--repo", str(repo))
    chat.expect("you> ")
    first = _ask(chat, "first request: alpha")
    assert "step 1" in first and "turn 1: prefill" in first
    second = _ask(chat, "second request: beta")
    assert "turn 2: prefill" in second
    chat.send("/quit")
    chat.expect("--resume")
    assert chat.close() == 0
    doc, state = _saved(tmp_path)
    assert state["requests"] == ["first request: alpha", "second request: beta"] and state["repo"] == str(repo)
    history = doc["turns"][-1]["history_tokens"]

    chat = _chat(tmp_path, tiny_model_dir, "--resume")
    banner = ANSI.sub("", chat.expect("you> "))
    assert "resumed: 2 requests" in banner and str(repo) in banner
    listed = _ask(chat, "/history")
    assert "1. first request: alpha" in listed and "2. second request: beta" in listed
    third = _ask(chat, "third request: gamma")
    assert "turn 3: prefill" in third
    stats = _ask(chat, "/stats")
    assert all(f"turn {n}: prefill" in stats for n in (1, 2, 3))
    chat.send("/quit")
    chat.expect("--resume")
    assert chat.close() == 0
    doc, state = _saved(tmp_path)
    users = _user_texts(doc)
    assert users.index("alpha") < users.index("beta") < users.index("gamma")  # one conversation, in order
    turn3 = doc["turns"][2]
    assert turn3["turn"] == 3 and turn3["prefill_tokens"] < history < turn3["history_tokens"]  # the cache went on
    assert doc["messages"][0]["role"] == "system" and sum(m["role"] == "system" for m in doc["messages"]) == 1


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_ctrl_c_stops_the_turn_and_keeps_the_session(tmp_path: Path, repo: Path, tiny_model_dir: Path) -> None:
    chat = Pty(["chat", "--session", "s", "--model", str(tiny_model_dir), "--max-steps", "30", "--max-new-tokens", "4",
                "--yolo", "--repo", str(repo)], cli_env(tmp_path / "home"), tmp_path)  # fmt: skip
    chat.expect("you> ")
    chat.send("keep going")
    chat.expect("step 1")
    chat.interrupt()
    out = ANSI.sub("", chat.expect("you> "))
    assert "stopping after the current step" in out and "turn stopped" in out
    doc, state = _saved(tmp_path)
    steps = len(doc["turns"])
    assert 1 <= steps < 30 and state["unseen"]  # the last observation waits for the next request
    after = _ask(chat, "/stats")
    assert f"{steps} turns" in after
    chat.send("/quit")
    assert chat.close() == 0


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_resume_errors_are_one_line(tmp_path: Path, repo: Path, tiny_model_dir: Path) -> None:
    from clilib import nexus

    env = cli_env(tmp_path / "home")
    res = nexus("chat", "--session", "nothing", "--resume", env=env, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: no chat session") and res.stderr.count("\n") == 1
    folder = tmp_path / "home" / "sessions" / "bad"
    folder.mkdir(parents=True)
    cs.ChatState(repo=str(repo), config={"model": str(tiny_model_dir)}, requests=["x"]).save(folder)
    (folder / cs.SESSION_FILE).write_bytes(b"\x00garbage, not a session")
    res = nexus("chat", "--session", "bad", "--resume", env=env, cwd=tmp_path)
    assert res.returncode == 2 and "is not a readable session file" in res.stderr and res.stderr.count("\n") == 1
    state = json.loads((folder / cs.STATE_FILE).read_text())
    for content in (b"{not json", b"\xff\xfe not UTF-8", json.dumps({**state, "config": "x"}).encode(), b"[]"):
        (folder / cs.STATE_FILE).write_bytes(content)
        res = nexus("chat", "--session", "bad", "--resume", env=env, cwd=tmp_path)
        assert res.returncode == 2 and "chat.json is corrupt" in res.stderr and res.stderr.count("\n") == 1, content
    (folder / cs.STATE_FILE).write_text(json.dumps(state))
    (folder / cs.SESSION_FILE).unlink()  # the history is gone: resuming would silently lose it
    res = nexus("chat", "--session", "bad", "--resume", env=env, cwd=tmp_path)
    assert res.returncode == 2 and "cannot be restored" in res.stderr and res.stderr.count("\n") == 1
    (folder / cs.STATE_FILE).write_text(json.dumps({**state, "repo": str(tmp_path / "vanished")}))
    res = nexus("chat", "--session", "bad", "--resume", env=env, cwd=tmp_path)
    assert res.returncode == 2 and "no longer a folder" in res.stderr and res.stderr.count("\n") == 1


def test_session_names_that_name_no_folder_are_refused() -> None:
    from pipeline.errors import RunError

    for name in ("", "a/b", ".hidden", "..", "a" * 201, "é" * 101):  # the last two: longer than a file name may be
        with pytest.raises(RunError, match="use a plain name"):
            cs.session_dir(name)
    assert cs.session_dir("my project").name == "my project"  # a repo folder's name, as the default session name


def test_confirm_mode_asks_before_changes_only() -> None:
    assert cs.needs_confirmation(ToolCall("execute_bash", {"cmd": "ls"}))
    assert cs.needs_confirmation(ToolCall("file_editor", {"command": "str_replace", "path": "/testbed/a.py"}))
    assert not cs.needs_confirmation(ToolCall("file_editor", {"command": "view", "path": "/testbed"}))
    assert not cs.needs_confirmation(ToolCall("search", {"search_term": "x"}))
    assert cs.describe(ToolCall("execute_bash", {"cmd": "pytest -q"})) == "$ pytest -q"


def test_confirm_answers(tmp_path: Path, repo: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The y/n/always gate of confirm mode, on a real Chat (tiny model session, bwrap sandbox on the repo)."""
    from chatlib import view
    from rich.console import Console

    from kvstore.session.session import Session, SessionConfig
    from pipeline.chat.local import LocalConversation

    session = Session.open(SessionConfig(model=str(tiny_model_dir), policy="full"))
    state = cs.ChatState(repo=str(repo), config=session.config.to_dict())
    with cs.open_repo_sandbox(repo, "t") as sandbox:
        conversation = LocalConversation(tmp_path, session, state.config)
        chat = view(Console(), tmp_path, state, conversation, sandbox)
        call = ToolCall("execute_bash", {"cmd": "touch made.txt"})
        answers = iter(["n", "y", "a"])
        monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
        assert "declined" in chat.runner.confirm(call)
        assert chat.runner.confirm(call) is None and not chat.runner.yolo
        assert chat.runner.confirm(call) is None and chat.runner.state.allow == ["touch"] and not chat.runner.yolo
        assert chat.runner.confirm(call) is None  # allowed now: no question (the iterator is empty)
        assert chat.runner.confirm(ToolCall("search", {"search_term": "x"})) is None
        res = cs.ChatEnvironment(sandbox).execute(call, timeout=30)
        assert res.returncode == 0 and (repo / "made.txt").is_file()  # the sandbox works on the user's repo itself
        chat.runner.writer.close()


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_second_ctrl_c_rolls_back_to_the_last_step(tmp_path: Path, repo: Path, tiny_model_dir: Path) -> None:
    args = ["chat", "--session", "s", "--model", str(tiny_model_dir), "--max-steps", "30", "--max-new-tokens", "400",
            "--temperature", "0", "--yolo", "--repo", str(repo)]  # fmt: skip
    chat = Pty(args, cli_env(tmp_path / "home"), tmp_path)
    chat.expect("you> ")
    chat.send("keep going")
    chat.expect("step 1")
    chat.expect("turn 1: prefill")
    chat.interrupt()
    chat.expect("stopping after the current step")
    chat.interrupt()  # the second press: now, mid-step
    out = ANSI.sub("", chat.expect("you> "))
    doc, _ = _saved(tmp_path)
    saved_turns = len(doc["turns"])
    if "back at its last complete step" not in out:
        pytest.skip("the step ended between the two presses (machine too fast for this timing)")
    assert f"{saved_turns} turns" in _ask(chat, "/stats")  # the session in memory is the saved one
    chat.send("/quit")
    assert chat.close() == 0


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_exit_words_and_a_second_chat_in_the_same_repo(tmp_path: Path, repo: Path, tiny_model_dir: Path) -> None:
    env = cli_env(tmp_path / "home")
    args = ["chat", "--repo", str(repo), "--model", str(tiny_model_dir), "--no-env", "--max-new-tokens", "4"]
    chat = Pty(args, env, tmp_path)
    banner = ANSI.sub("", chat.expect("you> "))
    assert "sandbox: bubblewrap, no network" in banner and "no Python env" in banner
    chat.send("exit")  # leaves: never a request for the agent
    assert "session proj is not kept" in ANSI.sub("", chat.expect("not kept")) and chat.close() == 0
    assert not (tmp_path / "home" / "sessions" / "proj").exists()  # a chat left empty is not kept
    chat = Pty(args, env, tmp_path)  # so the repo's next chat takes its name again
    out = ANSI.sub("", chat.expect("you> "))
    assert "exists" not in out and "nexus-agent chat proj" in out
    chat.send("/sessions")
    listed = ANSI.sub("", chat.expect("you> "))
    assert "proj  0 request(s)  " in listed and "(this chat)" in listed
    os.write(chat.master, b"\x04")  # Ctrl-D
    chat.expect("session proj is not kept")
    assert chat.close() == 0
